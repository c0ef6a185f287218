"""The ResNet example's network and training loop in PyTorch, for images/s side by side.

Same data (the shipped IDX files, standardized with the training split's mean and deviation),
same network (conv-bn-relu stem, 3x3/2 max pool, three stages of basic blocks with strided
1x1 conv-bn shortcuts, adaptive-average head, linear), same batch, the same shuffle (splitmix64
Fisher-Yates seeded with seed + epoch), Adam with Burn's defaults (betas 0.9/0.999, eps 1e-5)
and cosine decay per step, and a host-to-device batch plus a loss read-back every step, as
`examples/resnet/main.rs` does. Only the operators and the framework differ.

    python3 examples/resnet/pytorch_twin.py --dataset mnist10k --device cuda --epochs 2
    python3 examples/resnet/pytorch_twin.py --dataset mnist10k --epochs 1 --profile-steps 40

`--profile-steps N` then runs N more training steps under `torch.profiler` and prints how a
step's time splits between the convolution and pool operators (forward and backward, by the
operators' own time) and the rest, for README's comparison with `examples/resnet/profile.sh`.

Not used by the build or the tests. On CUDA, cuDNN may use TF32 for convolutions (PyTorch's
default, `torch.backends.cudnn.allow_tf32`); `--no-tf32` turns it off.
"""

import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
from torch import nn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def read_idx(path):
    if os.path.exists(path):
        raw = open(path, "rb").read()
    else:
        raw = gzip.open(path + ".gz", "rb").read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(dataset):
    scale = {"digits": 16.0, "mnist10k": 255.0}[dataset]
    folder = os.path.join(DATA, dataset)
    split = lambda name: (
        read_idx(os.path.join(folder, f"{name}-images-idx3-ubyte")).astype(np.float32) / scale,
        read_idx(os.path.join(folder, f"{name}-labels-idx1-ubyte")).astype(np.int64),
    )
    (train_x, train_y), (test_x, test_y) = split("train"), split("test")
    mean = train_x.astype(np.float64).mean()
    std = math.sqrt(((train_x.astype(np.float64) - mean) ** 2).mean())
    norm = lambda x: ((x - np.float32(mean)) / np.float32(std))[:, None]
    return (norm(train_x), train_y), (norm(test_x), test_y)


def shuffled(n, seed):
    """The example's splitmix64 Fisher-Yates shuffle, bit for bit."""
    mask = (1 << 64) - 1
    state = seed
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def conv(cin, cout, kernel, stride):
    return nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, cout, 3, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv(cout, cout, 3, 1), nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, in_channels, width, blocks, classes):
        super().__init__()
        self.stem = nn.Sequential(
            conv(in_channels, width, 3, 1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers, channels = [], width
        for stage, stage_width in enumerate([width, 2 * width, 4 * width]):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, stage_width, stride))
                channels = stage_width
        self.stages = nn.Sequential(*layers)
        self.head = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        return self.fc(self.head(self.stages(self.stem(x))).flatten(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits", choices=["digits", "mnist10k"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-tf32", action="store_true")
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="after training, profile this many steps and print the split")
    args = parser.parse_args()
    epochs = args.epochs or (4 if args.dataset == "mnist10k" else 15)
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    (train_x, train_y), (test_x, test_y) = load(args.dataset)
    model = ResNet(1, args.width, args.blocks, 10).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    loss_fn = nn.CrossEntropyLoss()
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{args.dataset} ({len(train_y)} train / {len(test_y)} test), ops: pytorch "
        f"{torch.__version__}, device: {device}, {params} parameters, {epochs} epochs of batch "
        f"{args.batch_size} with Adam, lr {args.lr} with cosine decay"
    )
    steps = math.ceil(len(train_y) / args.batch_size)
    run_start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        order = shuffled(len(train_y), args.seed + epoch)
        start, loss_sum, seen = time.perf_counter(), 0.0, 0
        for step in range(steps):
            chunk = order[step * args.batch_size : (step + 1) * args.batch_size]
            images = torch.from_numpy(train_x[chunk]).to(device)
            labels = torch.from_numpy(train_y[chunk]).to(device)
            progress = ((epoch - 1) * steps + step) / (epochs * steps)
            for group in optimizer.param_groups:
                group["lr"] = 0.5 * args.lr * (1 + math.cos(math.pi * progress))
            loss = train_step(model, optimizer, loss_fn, images, labels)
            loss_sum += loss * len(chunk)
            seen += len(chunk)
        seconds = time.perf_counter() - start
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_y), 256):
                images = torch.from_numpy(test_x[i : i + 256]).to(device)
                predicted = model(images).argmax(1).cpu().numpy()
                correct += int((predicted == test_y[i : i + 256]).sum())
        print(
            f"epoch {epoch:>2}: train loss {loss_sum / seen:.4f}, test accuracy "
            f"{100 * correct / len(test_y):.2f}%, {seen / seconds:.0f} images/s ({seconds:.1f} s)"
        )
    print(f"trained in {time.perf_counter() - run_start:.1f} s")
    if args.profile_steps:
        profile_split(model, optimizer, loss_fn, (train_x, train_y), args, device)


def train_step(model, optimizer, loss_fn, images, labels):
    """One step as the Rust example runs it; returns the loss, read back."""
    loss = loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def is_conv_or_pool(name):
    """A convolution or pool operator, forward or backward (aten's names: `aten::conv2d`,
    `aten::convolution_backward`, `aten::max_pool2d_with_indices_backward`, ...)."""
    return name.startswith("aten::") and ("conv" in name or "pool" in name)


def profile_split(model, optimizer, loss_fn, train, args, device):
    """Profile `--profile-steps` training steps: the conv and pool operators' own time (self
    time, so nested operators count once) per step, and its share of the step's wall time."""
    from torch.profiler import ProfilerActivity, profile

    train_x, train_y = train
    model.train()
    batches = []
    for step in range(args.profile_steps):
        chunk = [(step * args.batch_size + i) % len(train_y) for i in range(args.batch_size)]
        batches.append((torch.from_numpy(train_x[chunk]), torch.from_numpy(train_y[chunk])))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for images, labels in batches:
            train_step(model, optimizer, loss_fn, images.to(device), labels.to(device))
        wall = time.perf_counter() - start
    self_time = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = prof.key_averages()
    ops = sum(getattr(e, self_time) for e in events) * 1e-6
    conv_pool = sum(getattr(e, self_time) for e in events if is_conv_or_pool(e.key)) * 1e-6
    steps = args.profile_steps
    print(
        f"profile of {steps} steps: {wall / steps * 1e3:.2f} ms a step (profiled); "
        f"convolution and pool operators {conv_pool / steps * 1e3:.2f} ms a step, "
        f"{100 * conv_pool / wall:.0f}% of the step ({100 * conv_pool / ops:.0f}% of all "
        f"operators' time)"
    )
    for e in sorted(events, key=lambda e: -getattr(e, self_time))[:12]:
        print(f"  {e.key:<48} {getattr(e, self_time) / steps * 1e-3:8.2f} ms a step")


if __name__ == "__main__":
    main()
