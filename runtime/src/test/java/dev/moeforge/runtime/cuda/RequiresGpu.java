package dev.moeforge.runtime.cuda;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Marks a test class that needs a CUDA GPU: it is tagged {@code gpu} (so the bundle's
 * {@code bin/gpu-tests} selects it) and runs only where {@link Gpu} finds a device. Where there is
 * none the whole class is disabled, so every test in it is reported as skipped, with the probe's
 * reason; a broken install, or no GPU while {@code MOEFORGE_REQUIRE_GPU=1}, fails the class instead
 * (see {@link GpuCondition}). Every GPU test class carries this annotation; none skips by assumption.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Inherited
@Tag("gpu")
@ExtendWith(GpuCondition.class)
public @interface RequiresGpu {
}
