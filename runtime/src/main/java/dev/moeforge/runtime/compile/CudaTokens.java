package dev.moeforge.runtime.compile;

/**
 * The part of CUDA C++ source text that can change what nvcc compiles: the text with every comment
 * replaced by one space (as the compiler's own translation does), trailing spaces and blank lines
 * dropped. The kernel cache keys on it, so rewording a comment in a generated kernel or in the
 * device header never changes a key. (A cubin's line table may then point at a comment-shifted
 * line of the reworded source; the code is the same.)
 */
public final class CudaTokens {
    private CudaTokens() {}

    public static String of(String source) {
        StringBuilder out = new StringBuilder(source.length());
        int i = 0;
        int n = source.length();
        while (i < n) {
            char c = source.charAt(i);
            char next = i + 1 < n ? source.charAt(i + 1) : '\0';
            if (c == '/' && next == '/') {
                // a line comment ends at the newline, which stays (a backslash before it continues the comment)
                i += 2;
                while (i < n && source.charAt(i) != '\n') {
                    i += source.charAt(i) == '\\' && i + 1 < n && source.charAt(i + 1) == '\n' ? 2 : 1;
                }
                out.append(' ');
            } else if (c == '/' && next == '*') {
                int end = source.indexOf("*/", i + 2);
                i = end < 0 ? n : end + 2;
                out.append(' ');
            } else if (c == '"' || c == '\'') {
                int start = i++;
                while (i < n && source.charAt(i) != c && source.charAt(i) != '\n') {
                    i += source.charAt(i) == '\\' && i + 1 < n ? 2 : 1;
                }
                i = Math.min(n, i + 1);
                out.append(source, start, i);
            } else {
                out.append(c);
                i++;
            }
        }
        StringBuilder lines = new StringBuilder(out.length());
        for (String line : out.toString().split("\n", -1)) {
            String kept = line.stripTrailing();
            if (!kept.isEmpty()) {
                lines.append(kept).append('\n');
            }
        }
        return lines.toString();
    }
}
