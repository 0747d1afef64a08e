package dev.moeforge.runtime.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.runtime.cuda.Gpu.State;
import dev.moeforge.runtime.cuda.Gpu.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ConditionEvaluationResult;
import org.junit.platform.commons.support.AnnotationSupport;

/** What the GPU tests do on each kind of machine, and that every GPU test class decides the same way. */
class GpuConditionTest {

    private static final Status GPU = new Status(State.AVAILABLE, "");
    private static final Status NONE = new Status(State.ABSENT, "no CUDA driver on this machine: libcuda.so.1 missing");
    private static final Status BROKEN = new Status(State.BROKEN, "the CUDA driver is installed but fails: cuInit failed: CUDA_ERROR_UNKNOWN");

    @Test
    void aGpuRunsTheTestsRequiredOrNot() {
        assertFalse(GpuCondition.decide(GPU, false).isDisabled());
        assertFalse(GpuCondition.decide(GPU, true).isDisabled());
    }

    @Test
    void noGpuSkipsWithTheProbesReason() {
        ConditionEvaluationResult r = GpuCondition.decide(NONE, false);
        assertTrue(r.isDisabled());
        assertEquals(NONE.reason(), r.getReason().orElseThrow());
    }

    @Test
    void noGpuFailsWhereOneIsRequired() {
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> GpuCondition.decide(NONE, true));
        assertTrue(e.getMessage().contains("MOEFORGE_REQUIRE_GPU=1") && e.getMessage().contains(NONE.reason()), e.getMessage());
    }

    @Test
    void aBrokenInstallFailsRequiredOrNot() {
        for (boolean required : new boolean[] {false, true}) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> GpuCondition.decide(BROKEN, required));
            assertTrue(e.getMessage().startsWith("broken CUDA install") && e.getMessage().contains(BROKEN.reason()), e.getMessage());
        }
    }

    @Test
    void theRequireSettingIsReadStrictly() {
        assertFalse(GpuCondition.required(null));
        for (String no : new String[] {"", "0", "false", " FALSE "}) {
            assertFalse(GpuCondition.required(no), no);
        }
        for (String yes : new String[] {"1", "true", "TRUE"}) {
            assertTrue(GpuCondition.required(yes), yes);
        }
        for (String unclear : new String[] {"yes", "2", "on"}) {
            assertThrows(IllegalStateException.class, () -> GpuCondition.required(unclear), unclear);
        }
    }

    /**
     * Every test class of this module tagged gpu, or built on the GPU session, is tagged through
     * RequiresGpu: a bare {@code @Tag("gpu")} or a session without the annotation would open the
     * device in {@code @BeforeAll} on a machine without one.
     */
    @Test
    void everyGpuTestClassUsesRequiresGpu() throws Exception {
        Path root = Path.of(GpuConditionTest.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        assertTrue(Files.isDirectory(root), "expected the test classes directory, got " + root);
        Set<String> annotated = new TreeSet<>();
        List<String> offenders = new ArrayList<>();
        for (Class<?> c : classesUnder(root)) {
            if (c.isAnnotation()) {
                continue;  // RequiresGpu itself carries the tag
            }
            boolean taggedGpu = AnnotationSupport.findRepeatableAnnotations(c, Tag.class).stream().anyMatch(t -> t.value().equals("gpu"));
            boolean session = isGpuSession(c);
            boolean requires = AnnotationSupport.isAnnotated(c, RequiresGpu.class);
            if (requires) {
                annotated.add(c.getSimpleName());
            } else if (taggedGpu || session) {
                offenders.add(c.getName());
            }
        }
        assertTrue(offenders.isEmpty(), "GPU test classes without @RequiresGpu: " + offenders);
        assertTrue(annotated.containsAll(List.of("GpuSmokeTest", "ExpertLayerGpuTest", "FormatGpuTest", "MoeLayerGpuTest",
                "RouterGpuTest", "SplitDownGpuTest")), "the scan found only " + annotated);
    }

    private static boolean isGpuSession(Class<?> c) {
        for (Class<?> s = c.getSuperclass(); s != null; s = s.getSuperclass()) {
            if (s.getName().equals("dev.moeforge.runtime.moe.GpuSession")) {
                return !java.lang.reflect.Modifier.isAbstract(c.getModifiers());
            }
        }
        return false;
    }

    private static List<Class<?>> classesUnder(Path root) throws IOException, ClassNotFoundException {
        List<Class<?>> classes = new ArrayList<>();
        try (Stream<Path> files = Files.walk(root)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".class")).toList()) {
                String name = root.relativize(f).toString().replace(f.getFileSystem().getSeparator(), ".");
                name = name.substring(0, name.length() - ".class".length());
                if (!name.endsWith("package-info") && !name.endsWith("module-info")) {
                    classes.add(Class.forName(name, false, GpuConditionTest.class.getClassLoader()));
                }
            }
        }
        return classes;
    }
}
