package dev.moeforge.codegen.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.moeforge.dsl.ir.KernelSpec;
import dev.moeforge.dsl.text.SpecParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.TimeZone;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Golden CUDA: the generated source of a few canonical specs, byte for byte. Run with
 * {@code -Dmoeforge.updateGolden=true} to rewrite the files, then review the diff in git.
 */
class CudaEmitterGoldenTest {
    static final Path SPECS = Path.of("src/test/resources/golden");

    static Stream<Path> specs() throws IOException {
        try (Stream<Path> files = Files.list(SPECS)) {
            return files.filter(p -> p.toString().endsWith(".moe")).sorted().toList().stream();
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("specs")
    void matchesGolden(Path specFile) throws IOException {
        KernelSpec spec = SpecParser.parse(Files.readString(specFile), specFile.getFileName().toString());
        String got = CudaEmitter.emit(spec).source();
        Path golden = specFile.resolveSibling(specFile.getFileName().toString().replace(".moe", ".cu"));
        if (Boolean.getBoolean("moeforge.updateGolden")) {
            Files.writeString(golden, got, StandardCharsets.UTF_8);
            return;
        }
        assertTrue(Files.exists(golden), "no golden file " + golden + "; run with -Dmoeforge.updateGolden=true");
        String want = Files.readString(golden, StandardCharsets.UTF_8);
        if (!want.equals(got)) {
            fail("generated CUDA differs from " + golden + " " + firstDifference(want, got));
        }
    }

    @Test
    void sameSpecSameBytesUnderOtherLocalesAndThreads() throws Exception {
        List<KernelSpec> all = new ArrayList<>();
        for (Path p : specs().toList()) {
            all.add(SpecParser.parse(Files.readString(p)));
        }
        List<String> first = all.stream().map(s -> CudaEmitter.emit(s).source()).toList();
        Locale locale = Locale.getDefault();
        TimeZone zone = TimeZone.getDefault();
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try {
            Locale.setDefault(Locale.forLanguageTag("de-DE"));
            TimeZone.setDefault(TimeZone.getTimeZone("Asia/Kolkata"));
            List<Future<String>> again = new ArrayList<>();
            for (int round = 0; round < 3; round++) {
                for (KernelSpec s : all.reversed()) {
                    again.add(pool.submit((Callable<String>) () -> CudaEmitter.emit(s).source()));
                }
            }
            for (int i = 0; i < again.size(); i++) {
                int index = all.size() - 1 - (i % all.size());
                assertEquals(first.get(index), again.get(i).get(), "output of " + all.get(index).name() + " changed");
            }
        } finally {
            Locale.setDefault(locale);
            TimeZone.setDefault(zone);
            pool.shutdown();
        }
    }

    /** Where two texts first differ: the line number and both lines. */
    static String firstDifference(String want, String got) {
        String[] a = want.split("\n", -1);
        String[] b = got.split("\n", -1);
        for (int i = 0; i < Math.max(a.length, b.length); i++) {
            String x = i < a.length ? a[i] : "<end of file>";
            String y = i < b.length ? b[i] : "<end of file>";
            if (!x.equals(y)) {
                return "at line " + (i + 1) + ":\n  golden:    " + x + "\n  generated: " + y;
            }
        }
        return "(line endings only)";
    }
}
