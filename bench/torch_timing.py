"""Timing helpers the PyTorch baseline scripts share: CUDA-event medians and CUDA-graph capture."""
import sys

import torch


def time_ms(fn, warmup, reps):
    """Median milliseconds of `reps` calls of fn (after `warmup`), each between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in zip(starts, ends))[reps // 2]


def graphed(step):
    """step captured in a CUDA graph (its replay), or None, with the reason on stderr, when capture fails."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return graph.replay
    except Exception as e:  # noqa: BLE001 - report and let the caller time it eagerly
        print(f"graph capture failed: {e}", file=sys.stderr)
        return None
