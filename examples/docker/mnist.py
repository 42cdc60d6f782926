"""Train a small classifier on MNIST: the command the entrypoint-prefix image runs.

It downloads the training set over HTTP at start (the step that fails with
"connection refused" when a mesh sidecar is not ready yet), trains a
two-layer network for --epochs, and prints one line per epoch. It needs only
PyTorch; MNIST_URL moves the download to a mirror of your own.
"""
import argparse
import gzip
import os
import struct
import urllib.request

import torch
from torch import nn

MIRROR = os.environ.get("MNIST_URL", "https://ossci-datasets.s3.amazonaws.com/mnist")


def download(name):
    with urllib.request.urlopen(f"{MIRROR}/{name}", timeout=60) as response:
        return gzip.decompress(response.read())


def load():
    images = download("train-images-idx3-ubyte.gz")
    labels = download("train-labels-idx1-ubyte.gz")
    count, rows, cols = struct.unpack(">III", images[4:16])
    x = torch.frombuffer(bytearray(images[16:]), dtype=torch.uint8).float().div(255).view(count, rows * cols)
    y = torch.frombuffer(bytearray(labels[8:]), dtype=torch.uint8).long()
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    x, y = load()
    print(f"downloaded {len(x)} training images", flush=True)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x))
        for start in range(0, len(x), args.batch_size):
            batch = order[start : start + args.batch_size]
            optimiser.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            loss.backward()
            optimiser.step()
        accuracy = (model(x).argmax(1) == y).float().mean().item()
        print(f"epoch {epoch}: loss {loss.item():.3f}, training accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
