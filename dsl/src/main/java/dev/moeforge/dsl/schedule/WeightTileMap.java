package dev.moeforge.dsl.schedule;

import java.util.List;

/**
 * How the tensor memory accelerator sees an expert weight: a tensor of bf16 or of 8-bit codes, up to five dimensions,
 * the first contiguous, copied a box at a time into shared memory in the 128-byte swizzle; what the
 * runtime encodes (with the weight's device address) into the kernel's {@code __grid_constant__}
 * tensor map. Elements past a dimension's size arrive as zeros.
 *
 * @param elementBytes bytes of one element: 2 (bf16) or 1 (FP8 codes)
 * @param dims        elements along each dimension, the contiguous one first
 * @param strideBytes bytes between consecutive indices of dimensions 1.. (one fewer than dims; any
 *                    order, so a box may walk two rows of the weight that are far apart side by side)
 * @param box         elements of each dimension one copy brings
 */
public record WeightTileMap(int elementBytes, List<Long> dims, List<Long> strideBytes, List<Integer> box) {
    /** The tensor map's inner box must fit the 128-byte swizzle span. */
    public static final int SWIZZLE_BYTES = 128;
    /** The longest box edge the copy engine takes. */
    public static final int MAX_BOX = 256;

    public WeightTileMap {
        if (elementBytes != 1 && elementBytes != 2) {
            throw new IllegalArgumentException("tensor map elements of 1 or 2 bytes, not " + elementBytes);
        }
        dims = List.copyOf(dims);
        strideBytes = List.copyOf(strideBytes);
        box = List.copyOf(box);
        if (dims.isEmpty() || dims.size() > 5 || strideBytes.size() != dims.size() - 1 || box.size() != dims.size()) {
            throw new IllegalArgumentException("a tensor map of 1-5 dimensions, a stride for each but the first, a box edge for each: "
                    + dims + ", " + strideBytes + ", " + box);
        }
        for (long s : strideBytes) {
            if (s % 16 != 0) {
                throw new IllegalArgumentException("tensor map strides are multiples of 16 bytes: " + strideBytes);
            }
        }
        for (int i = 0; i < dims.size(); i++) {
            if (dims.get(i) < 1 || box.get(i) < 1 || box.get(i) > MAX_BOX) {
                throw new IllegalArgumentException("tensor map dimension " + i + ": size " + dims.get(i) + " and box edge "
                        + box.get(i) + "; sizes at least 1, box edges 1.." + MAX_BOX);
            }
        }
        if (box.getFirst() * elementBytes > SWIZZLE_BYTES) {
            throw new IllegalArgumentException("the inner box edge " + box.getFirst() + " x " + elementBytes
                    + " bytes exceeds the 128-byte swizzle span");
        }
    }

    /** Bytes one copy of the box brings. */
    public long boxBytes() {
        long n = elementBytes;
        for (int b : box) {
            n *= b;
        }
        return n;
    }
}
