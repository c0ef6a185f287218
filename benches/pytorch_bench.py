#!/usr/bin/env python3
"""Times the shapes of benches/catalogue.json with PyTorch, for the report's PyTorch column.

    python3 benches/pytorch_bench.py [--device cpu|cuda] [--full] [--processes N] [--append]

Writes benches/pytorch.json: {"torch_version", "device", "device_name", "processes",
"results": {id: seconds}, "spread": {id: slowest / fastest process}, "runs": [{id: seconds}]}
with ids `{conv|conv_transpose|pool}/{case}/{pass}` as in the Rust benches, plus
`conv_epilogue/{case}/forward` and `conv_bn_act/{case}/step` for `benches/epilogue.rs`. `--append` adds
this call's processes to the runs already in the file (same torch, device and rows), which
is how `benches/report.sh` alternates PyTorch's processes with its Rust rounds. Needs torch;
the build and the tests never run it.

Calls are timed in batches queued back to back with one sync (CUDA) at the end of each, as the
Rust benches time theirs, and the mean per call over up to 10 batches after 2 warm-up calls is
one process's time. A CPU row's time moves up to 6x between processes (thread placement, the
allocator's state), so every row is timed in `--processes` separate processes (default 3) and
the fastest is kept: noise may flatter PyTorch, never us. Convolution gradients run what
training runs, `aten.convolution_backward` on the real input, weight and output gradient with
the output mask of the one gradient (`torch.nn.grad.conv*d_*` hands it an expanded dummy input
instead, up to 1.8x slower).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
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
    stride, padding = list(case["stride"]), list(case["padding"])
    kw = dict(stride=stride, padding=padding, groups=g)
    if not transposed:
        w = torch.rand([c_out, c_in // g] + case["kernel"], device=device)
        op = getattr(F, "conv%dd" % nd)
    else:
        w = torch.rand([c_in, c_out // g] + case["kernel"], device=device)
        op = getattr(F, "conv_transpose%dd" % nd)
    grad = torch.rand(op(x, w, **kw).shape, device=device)

    def backward(mask):
        # What autograd runs for the layer's gradient, on the real tensors, only `mask`'s output.
        return lambda: torch.ops.aten.convolution_backward(
            grad, x, w, None, stride, padding, [1] * nd, transposed, [0] * nd, g, mask)

    return {
        "forward": lambda: op(x, w, **kw),
        "grad_input": backward([True, False, False]),
        "grad_weight": backward([False, True, False]),
    }


def epilogue_fns(case, device):
    """A conv, its bias and a ReLU as a PyTorch user writes them (`benches/epilogue.rs`)."""
    x = torch.rand(case["x"], device=device)
    w = torch.rand([case["out_channels"], case["x"][1]] + case["kernel"], device=device)
    b = torch.rand([case["out_channels"]], device=device)
    kw = dict(stride=list(case["stride"]), padding=list(case["padding"]))
    return {"forward": lambda: F.relu(F.conv2d(x, w, b, **kw))}


def block_fns(case, device):
    """ResNet's block as a PyTorch user trains it (`benches/epilogue.rs`'s `conv_bn_act` rows):
    conv without bias, batch norm in training mode, ReLU; the gradient of the output's sum
    for the three parameters."""
    conv = torch.nn.Conv2d(case["x"][1], case["out_channels"], case["kernel"],
                           stride=case["stride"], padding=case["padding"], bias=False).to(device)
    bn = torch.nn.BatchNorm2d(case["out_channels"]).to(device)
    x = torch.rand(case["x"], device=device)
    params = [conv.weight, bn.weight, bn.bias]

    def step():
        with torch.enable_grad():
            return torch.autograd.grad(F.relu(bn(conv(x))).sum(), params)

    return {"step": step}


def epilogue_case(case):
    """The ResNet rows `benches/epilogue.rs` times: 2D, one group."""
    return case["name"].startswith("resnet") and len(case["kernel"]) == 2 and case["groups"] == 1


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


def cpu_name():
    """The CPU's model name where the system reports one (Linux), else its architecture."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The row families this script times: `{family}/{case}/{pass}`.
FAMILIES = ("conv", "conv_transpose", "pool", "conv_epilogue", "conv_bn_act")


def time_rows(device, full, families):
    """One process's time of every row of the profile in `families`, by id."""
    with open(os.path.join(HERE, "catalogue.json")) as f:
        catalogue = json.load(f)
    results = {}
    torch.set_grad_enabled(False)
    for family, key in (("conv", "conv"), ("conv_transpose", "conv_transpose"), ("pool", "pool")):
        if family not in families:
            continue
        for case in catalogue[key]:
            if not (full or case["quick"]):
                continue
            if family == "pool":
                fns = pool_fns(case, device)
            else:
                fns = conv_fns(case, family == "conv_transpose", device)
            for pass_name, fn in fns.items():
                row = "%s/%s/%s" % (family, case["name"], pass_name)
                results[row] = timed(fn, device)
                print("%s: %.3f ms" % (row, results[row] * 1e3), flush=True)
    # The ResNet rows of `benches/epilogue.rs`: one pass name per family.
    for family, fns in (("conv_epilogue", epilogue_fns), ("conv_bn_act", block_fns)):
        if family not in families:
            continue
        for case in catalogue["conv"]:
            if not ((full or case["quick"]) and epilogue_case(case)):
                continue
            for pass_name, fn in fns(case, device).items():
                row = "%s/%s/%s" % (family, case["name"], pass_name)
                results[row] = timed(fn, device)
                print("%s: %.3f ms" % (row, results[row] * 1e3), flush=True)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--full", action="store_true",
                        help="every case (default: BENCH_PROFILE=full, else the quick ones)")
    parser.add_argument("--processes", type=int, default=3,
                        help="separate processes that time every row; the fastest is kept")
    parser.add_argument("--append", action="store_true",
                        help="keep the processes already in benches/pytorch.json and add these")
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help="comma-separated row families to time (default: all of %s)"
                        % ",".join(FAMILIES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    full = args.full or os.environ.get("BENCH_PROFILE") == "full"
    families = args.families.split(",")
    unknown = set(families) - set(FAMILIES)
    if unknown:
        parser.error("unknown families %s" % sorted(unknown))
    if args.child:
        with open(args.child, "w") as f:
            json.dump(time_rows(args.device, full, families), f)
        return
    name = torch.cuda.get_device_name() if args.device == "cuda" else (
        cpu_name() + ", %d threads" % torch.get_num_threads())
    path = os.path.join(HERE, "pytorch.json")
    runs = earlier_runs(path, args.device, name) if args.append else []
    for process in range(args.processes):
        print("process %d of %d" % (process + 1, args.processes), flush=True)
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, os.path.abspath(__file__), "--device", args.device,
                       "--families", args.families, "--child", out.name] + (
                           ["--full"] if full else [])
            subprocess.run(command, check=True)
            with open(out.name) as f:
                runs.append(json.load(f))
    rows = [row for row in runs[-1] if all(row in run for run in runs)]
    results = {row: min(run[row] for run in runs) for row in rows}
    spread = {row: max(run[row] for run in runs) / results[row] for row in rows}
    out = {"torch_version": torch.__version__, "device": args.device, "device_name": name,
           "processes": len(runs), "results": results, "spread": spread, "runs": runs}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    worst = max(spread, key=spread.get)
    print("wrote benches/pytorch.json: fastest of %d processes per row; widest spread %.2fx (%s)"
          % (len(runs), spread[worst], worst))


def earlier_runs(path, device, name):
    """The per-process times already in `path`, if its torch, device and machine are these."""
    try:
        with open(path) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        return []
    same = (earlier.get("torch_version"), earlier.get("device"), earlier.get("device_name")) == (
        torch.__version__, device, name)
    return earlier.get("runs", []) if same else []


if __name__ == "__main__":
    main()
