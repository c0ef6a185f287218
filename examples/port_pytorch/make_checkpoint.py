#!/usr/bin/env python3
"""The PyTorch side of the porting example: a small CNN that uses every module family this
crate ports, its weights as a PyTorch user has them, and what PyTorch computes with them.

Writes, next to this script:
  portnet.safetensors  the state_dict (safetensors.torch.save_file)
  portnet.pt           the same state_dict (torch.save), for burn-store's PytorchStore
  portnet.json         an input, an output gradient, PyTorch's logits and the gradient of
                       sum(logits * grad_output) for the input and every parameter, in float64
                       from the float32 weights

    pip install torch safetensors
    python3 examples/port_pytorch/make_checkpoint.py

`cargo run --release --example port_pytorch` loads them into the same network built from
burn-convpool's modules; `tests/suite/port_pytorch.rs` checks every value.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(20261126)


class PortNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1, padding_mode="reflect")
        self.norm = nn.BatchNorm2d(8)
        self.grouped = nn.Conv2d(8, 8, 3, padding="same", dilation=2, groups=2)
        self.depthwise = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.max_pool = nn.MaxPool2d(3, stride=2, ceil_mode=True, return_indices=True)
        self.unpool = nn.MaxUnpool2d(3, stride=2)
        self.avg_pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False)
        self.lp_pool = nn.LPPool2d(2, 2, stride=1)
        self.adaptive_max = nn.AdaptiveMaxPool2d((3, 3))
        self.adaptive_avg = nn.AdaptiveAvgPool2d((None, 3))
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.sequence = nn.Conv1d(4, 4, 4, padding="same", padding_mode="replicate")
        # Named `fc` as many PyTorch models do; the Rust side calls it `head` and remaps the keys.
        self.fc = nn.Linear(4 * 36 + 8 * 7 * 3, 10)

    def forward(self, x):
        x = F.relu(self.norm(self.stem(x)))                 # (n, 8, 16, 16)
        x = F.relu(self.grouped(x))                         # (n, 8, 16, 16)
        x = self.depthwise(x)                               # (n, 8, 8, 8)
        pooled, indices = self.max_pool(x)                  # (n, 8, 4, 4)
        sparse = self.unpool(pooled, indices, output_size=x.shape[-2:])  # (n, 8, 8, 8)
        coarse = self.adaptive_max(self.avg_pool(sparse))   # (n, 8, 5, 5) -> (n, 8, 3, 3)
        up = self.up(coarse)                                # (n, 4, 6, 6)
        sequence = self.sequence(up.flatten(2))             # (n, 4, 36)
        energy = self.adaptive_avg(self.lp_pool(x))         # (n, 8, 7, 7) -> (n, 8, 7, 3)
        features = torch.cat([sequence.flatten(1), energy.flatten(1)], dim=1)
        return self.fc(features)


def encode(tensor):
    tensor = tensor.detach().to(torch.float64)
    return {"shape": list(tensor.shape), "data": tensor.flatten().tolist()}


def main():
    model = PortNet()
    # Some training steps, so the batch norm's running statistics are not the defaults.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        loss = model(torch.randn(4, 1, 16, 16)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    state = {key: value.contiguous() for key, value in model.state_dict().items()}
    save_file(state, os.path.join(HERE, "portnet.safetensors"))
    torch.save(state, os.path.join(HERE, "portnet.pt"))

    # The check runs in float64 from the stored float32 values, in training mode (the batch
    # norm normalizes with the batch's statistics), as a fine-tuning step would.
    model64 = PortNet().to(torch.float64)
    model64.load_state_dict(state)
    x = torch.randn(2, 1, 16, 16).to(torch.float32).to(torch.float64).requires_grad_()
    grad_output = torch.randn(2, 10).to(torch.float32).to(torch.float64)
    logits = model64(x)
    (logits * grad_output).sum().backward()
    grads = {"x": encode(x.grad)}
    grads.update({name: encode(param.grad) for name, param in model64.named_parameters()})
    document = {
        "about": "PortNet (make_checkpoint.py): input, output gradient, logits and gradients "
                 "of sum(logits * grad_output), float64, PyTorch %s" % torch.__version__,
        "x": encode(x),
        "grad_output": encode(grad_output),
        "logits": encode(logits),
        "grads": grads,
    }
    with open(os.path.join(HERE, "portnet.json"), "w") as f:
        json.dump(document, f)
    print("wrote portnet.safetensors, portnet.pt and portnet.json: %d tensors, %d parameters"
          % (len(state), sum(p.numel() for p in model.parameters())))


if __name__ == "__main__":
    main()
