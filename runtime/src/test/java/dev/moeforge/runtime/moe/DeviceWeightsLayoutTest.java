package dev.moeforge.runtime.moe;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moeforge.dsl.ir.WeightFormat;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The two layouts of the same sizes are told apart by their tag, which the layer executors check. */
class DeviceWeightsLayoutTest {

    @Test
    void wrongLayoutIsRefusedNamingBoth() {
        DeviceWeights natural = new DeviceWeights(WeightFormat.NVFP4, DeviceWeights.Layout.NATURAL, List.of());
        DeviceWeights split = new DeviceWeights(WeightFormat.NVFP4, DeviceWeights.Layout.SPLIT_DOWN, List.of());
        natural.requireLayout(DeviceWeights.Layout.NATURAL, "down's weights");
        split.requireLayout(DeviceWeights.Layout.SPLIT_DOWN, "down's weights");
        String m = assertThrows(IllegalArgumentException.class,
                () -> natural.requireLayout(DeviceWeights.Layout.SPLIT_DOWN, "down's weights")).getMessage();
        assertTrue(m.contains("down's weights are in the NATURAL layout, the kernel reads SPLIT_DOWN"), m);
        assertTrue(m.contains("SplitDownWeights.of(down)"), m);
        m = assertThrows(IllegalArgumentException.class, () -> split.requireLayout(DeviceWeights.Layout.NATURAL, "down's weights"))
                .getMessage();
        assertTrue(m.contains("in the SPLIT_DOWN layout, the kernel reads NATURAL"), m);
    }
}
