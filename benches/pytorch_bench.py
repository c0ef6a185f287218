#!/usr/bin/env python3
"""Times the shapes of benches/catalogue.json with PyTorch, for the report's PyTorch column.

    python3 benches/pytorch_bench.py [--device cpu|cuda] [--full]

Writes benches/pytorch.json: {"torch_version", "device", "device_name", "results": {id: seconds}}
with ids `{conv|conv_transpose|pool}/{case}/{pass}` as in the Rust benches. Needs torch; the
build and the tests never run it. Calls are timed in batches queued back to back with one sync
(CUDA) at the end of each, as the Rust benches time theirs, and the mean per call over up to 10
batches after 2 warm-up calls is kept.
"""
import argparse
import json
import os
import platform
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn, device):
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    for _ in range(2):
        fn()
    sync()
    # A batch lasts about 20 ms, so one sync (tens of microseconds on CUDA) is not timed per call.
    start = time.perf_counter()
    fn()
    sync()
    batch = max(1, min(1000, int(0.02 / max(time.perf_counter() - start, 1e-6))))
    runs, total = 0, 0.0
    while runs < 10 * batch and (total < 2.0 or runs < 3 * batch):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        total += time.perf_counter() - start
        runs += batch
    return total / runs


def conv_fns(case, transposed, device):
    nd = len(case["kernel"])
    x = torch.rand(case["x"], device=device)
    c_in, c_out, g = case["x"][1], case["out_channels"], case["groups"]
    kw = dict(stride=case["stride"], padding=case["padding"], groups=g)
    conv = getattr(F, "conv%dd" % nd)
    conv_input = getattr(torch.nn.grad, "conv%dd_input" % nd)
    conv_weight = getattr(torch.nn.grad, "conv%dd_weight" % nd)
    if not transposed:
        w = torch.rand([c_out, c_in // g] + case["kernel"], device=device)
        y = conv(x, w, **kw)
        grad = torch.rand(y.shape, device=device)
        return {
            "forward": lambda: conv(x, w, **kw),
            "grad_input": lambda: conv_input(x.shape, w, grad, **kw),
            "grad_weight": lambda: conv_weight(x, w.shape, grad, **kw),
        }
    w = torch.rand([c_in, c_out // g] + case["kernel"], device=device)
    conv_t = getattr(F, "conv_transpose%dd" % nd)
    y = conv_t(x, w, **kw)
    grad = torch.rand(y.shape, device=device)
    # conv_transpose is the adjoint of conv with the same weight: its input gradient is that
    # conv of the output gradient, its weight gradient that conv's weight gradient.
    return {
        "forward": lambda: conv_t(x, w, **kw),
        "grad_input": lambda: conv(grad, w, **kw),
        "grad_weight": lambda: conv_weight(grad, w.shape, x, **kw),
    }


def laid_out(t, case):
    """`t` channels-last in memory where the case asks for it (as our bench lays its tensors)."""
    if not case.get("channels_last"):
        return t
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.contiguous(memory_format=fmt)


def pool_fns(case, device):
    nd = len(case["x"]) - 2
    x = laid_out(torch.rand(case["x"], device=device), case)
    aten = torch.ops.aten
    if case["op"] == "max_pool":
        k, s, p = case["kernel"], case["stride"], case["padding"]
        pool = getattr(F, "max_pool%dd" % nd)
        y, indices = pool(x, k, s, p, return_indices=True)
        grad = laid_out(torch.rand(y.shape, device=device), case)
        backward = getattr(aten, "max_pool%dd_with_indices_backward" % nd)
        return {
            "forward": lambda: pool(x, k, s, p, return_indices=True),
            "backward": lambda: backward(grad, x, k, s, p, [1] * nd, False, indices),
        }
    if case["op"] == "avg_pool":
        k, s, p = case["kernel"], case["stride"], case["padding"]
        pool = getattr(F, "avg_pool%dd" % nd)
        y = pool(x, k, s, p)
        grad = laid_out(torch.rand(y.shape, device=device), case)
        backward = getattr(aten, "avg_pool%dd_backward" % nd)
        return {
            "forward": lambda: pool(x, k, s, p),
            "backward": lambda: backward(grad, x, k, s, p, False, True, None),
        }
    if case["op"] == "lp_pool":
        k, s, norm = case["kernel"], case["stride"], case["norm"]
        pool = getattr(F, "lp_pool%dd" % nd)
        # LP pooling has no backward op: autograd's, through a graph recorded once.
        x_leaf = x.clone().requires_grad_(True)
        with torch.enable_grad():
            y = pool(x_leaf, norm, k, s)
        grad = laid_out(torch.rand(y.shape, device=device), case)
        return {
            "forward": lambda: pool(x, norm, k, s),
            "backward": lambda: torch.autograd.grad(y, x_leaf, grad, retain_graph=True),
        }
    pool = getattr(F, "adaptive_avg_pool%dd" % nd)
    y = pool(x, case["output"])
    grad = laid_out(torch.rand(y.shape, device=device), case)
    backward = getattr(aten, "_adaptive_avg_pool%dd_backward" % nd)
    return {"forward": lambda: pool(x, case["output"]), "backward": lambda: backward(grad, x)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--full", action="store_true",
                        help="every case (default: BENCH_PROFILE=full, else the quick ones)")
    args = parser.parse_args()
    full = args.full or os.environ.get("BENCH_PROFILE") == "full"
    with open(os.path.join(HERE, "catalogue.json")) as f:
        catalogue = json.load(f)
    results = {}
    torch.set_grad_enabled(False)
    for family, key in (("conv", "conv"), ("conv_transpose", "conv_transpose"), ("pool", "pool")):
        for case in catalogue[key]:
            if not (full or case["quick"]):
                continue
            if family == "pool":
                fns = pool_fns(case, args.device)
            else:
                fns = conv_fns(case, family == "conv_transpose", args.device)
            for pass_name, fn in fns.items():
                seconds = timed(fn, args.device)
                results["%s/%s/%s" % (family, case["name"], pass_name)] = seconds
                print("%s/%s/%s: %.3f ms" % (family, case["name"], pass_name, seconds * 1e3))
    name = torch.cuda.get_device_name() if args.device == "cuda" else (
        platform.processor() or platform.machine()) + ", %d threads" % torch.get_num_threads()
    out = {"torch_version": torch.__version__, "device": args.device, "device_name": name,
           "results": results}
    with open(os.path.join(HERE, "pytorch.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("wrote benches/pytorch.json")


if __name__ == "__main__":
    main()
