package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Map;
import org.junit.jupiter.api.Test;

/** A router's row(...) buffers (gpt-oss's bias, DeepSeek-V3's correction bias) hold exactly one value per expert. */
class RouterRowLengthTest {

    @Test
    void aRowOfEValuesIsTaken() {
        assertDoesNotThrow(() -> RouterKernel.requireRowLengths("gpt_oss_20b_router", 32, Map.of("bias", 32L)));
    }

    @Test
    void aShortBiasIsRefusedWithItsNameAndTheRule() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RouterKernel.requireRowLengths("gpt_oss_20b_router", 32, Map.of("bias", 31L)));
        assertEquals("router gpt_oss_20b_router: row(bias) holds one fp32 value per expert, exactly 32; the buffer given holds 31",
                e.getMessage());
    }

    @Test
    void aLongBiasIsRefusedToo() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RouterKernel.requireRowLengths("deepseek_v3_router", 256, Map.of("correction_bias", 512L)));
        assertEquals("router deepseek_v3_router: row(correction_bias) holds one fp32 value per expert, exactly 256; the buffer given "
                + "holds 512", e.getMessage());
    }
}
