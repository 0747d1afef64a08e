package dev.moeforge.dsl.schedule;

/**
 * One member of a generated kernel's {@code struct Config}, which the device header reads by
 * name ({@code Config::kWarpsPerCta}): the typed boundary between Java and CUDA.
 *
 * @param name        the C++ name, e.g. {@code kWarpsPerCta} or {@code Format}
 * @param declaration the whole member declaration, e.g. {@code static constexpr int kWarpsPerCta = 4;}
 */
public record ConfigConstant(String name, String declaration) {

    public static ConfigConstant integer(String name, long value) {
        if (value < Integer.MIN_VALUE || value > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(name + " = " + value + " does not fit a C++ int");
        }
        return new ConfigConstant(name, "static constexpr int " + name + " = " + value + ";");
    }

    /** An FP32 constant, written with the digits that give back the same float. */
    public static ConfigConstant real(String name, double value) {
        float f = (float) value;
        if (!Float.isFinite(f)) {
            throw new IllegalArgumentException(name + " = " + value + " is not a finite FP32 number");
        }
        return new ConfigConstant(name, "static constexpr float " + name + " = " + Float.toString(f) + "f;");
    }

    public static ConfigConstant bool(String name, boolean value) {
        return new ConfigConstant(name, "static constexpr bool " + name + " = " + value + ";");
    }

    /** A constant of an enumeration of the device header, e.g. {@code mf::GateUpLayout::kStacked}. */
    public static ConfigConstant enumerator(String name, String cppType, String value) {
        return new ConfigConstant(name, "static constexpr " + cppType + " " + name + " = " + value + ";");
    }

    /** A type member, e.g. {@code using Format = mf::Bf16Weights;}. */
    public static ConfigConstant type(String name, String cppType) {
        return new ConfigConstant(name, "using " + name + " = " + cppType + ";");
    }
}
