#!/usr/bin/env python3
"""ImageNet-sized CNNs as ONNX, written the way PyTorch exports torchvision's.

    python3 bench/gen_cnn.py {resnet18,resnet50,mobilenetv2} OUT.onnx [--size 224]

Image [batch, 3, size, size] (float32) -> logits [batch, 1000]. Each conv is
Conv (no bias) + BatchNormalization (+ Relu, or Clip(0, 6) for MobileNetV2's
ReLU6), as an export in eval mode gives before any optimizer runs, so the
benchmark measures what slimserve does with such a graph at load:
  resnet18     BasicBlocks [2, 2, 2, 2], 11.7 M parameters
  resnet50     Bottlenecks [3, 4, 6, 3], 25.6 M parameters
  mobilenetv2  inverted residuals with depthwise 3x3 convs, width 1.0, 3.5 M
Weights are He-normal and BN statistics random but plausible, so that
activations stay O(1) through the depth and comparisons stay meaningful.
"""

import argparse
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, **attrs):
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, c_in, c_out, k, stride, act="relu", group=1):
        n = self.count + 1
        fan_in = c_in // group * k * k
        w = (self.rng.standard_normal((c_out, c_in // group, k, k)) *
             math.sqrt(2.0 / fan_in)).astype(np.float32)
        pad = k // 2
        y = self.op("Conv", [x, self.const(f"conv{n}.weight", w)], kernel_shape=[k, k],
                    strides=[stride, stride], pads=[pad] * 4, group=group)
        r = self.rng
        bn = [self.const(f"bn{n}.{p}", v.astype(np.float32)) for p, v in (
            ("weight", 1.0 + 0.1 * r.standard_normal(c_out)),
            ("bias", 0.1 * r.standard_normal(c_out)),
            ("running_mean", 0.1 * r.standard_normal(c_out)),
            ("running_var", r.uniform(0.5, 1.5, c_out)))]
        y = self.op("BatchNormalization", [y] + bn, epsilon=1e-5)
        if act == "relu":
            y = self.op("Relu", [y])
        elif act == "relu6":
            y = self.op("Clip", [y, self.const(f"clip{n}.min", np.array(0.0, np.float32)),
                                 self.const(f"clip{n}.max", np.array(6.0, np.float32))])
        return y

    def head(self, x, c):
        h = self.op("GlobalAveragePool", [x])
        h = self.op("Flatten", [h], axis=1)
        w = (self.rng.standard_normal((1000, c)) / math.sqrt(c)).astype(np.float32)
        b = (0.01 * self.rng.standard_normal(1000)).astype(np.float32)
        return self.op("Gemm", [h, self.const("fc.weight", w), self.const("fc.bias", b)],
                       transB=1)


def resnet(b, bottleneck, blocks):
    h = b.conv_bn("image", 3, 64, 7, 2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in, expansion = 64, 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        width = 64 << stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            c_out = width * expansion
            if bottleneck:
                y = b.conv_bn(h, c_in, width, 1, 1)
                y = b.conv_bn(y, width, width, 3, stride)
                y = b.conv_bn(y, width, c_out, 1, 1, act=None)
            else:
                y = b.conv_bn(h, c_in, width, 3, stride)
                y = b.conv_bn(y, width, width, 3, 1, act=None)
            if stride != 1 or c_in != c_out:
                h = b.conv_bn(h, c_in, c_out, 1, stride, act=None)
            h = b.op("Relu", [b.op("Add", [y, h])])
            c_in = c_out
    return b.head(h, c_in)


def mobilenetv2(b):
    h = b.conv_bn("image", 3, 32, 3, 2, act="relu6")
    c_in = 32
    # (expansion, channels, repeats, first stride), as in the paper
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            y = h
            if t != 1:
                y = b.conv_bn(y, c_in, hidden, 1, 1, act="relu6")
            y = b.conv_bn(y, hidden, hidden, 3, stride, act="relu6", group=hidden)
            y = b.conv_bn(y, hidden, c, 1, 1, act=None)
            h = b.op("Add", [h, y]) if stride == 1 and c_in == c else y
            c_in = c
    h = b.conv_bn(h, c_in, 1280, 1, 1, act="relu6")
    return b.head(h, 1280)


def build(arch, size, seed=11):
    b = Builder(seed)
    if arch == "resnet18":
        b_out = resnet(b, False, [2, 2, 2, 2])
    elif arch == "resnet50":
        b_out = resnet(b, True, [3, 4, 6, 3])
    else:
        b_out = mobilenetv2(b)
    b.nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        b.nodes, arch,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="slimserve-bench")
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arch", choices=["resnet18", "resnet50", "mobilenetv2"])
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    model = build(a.arch, a.size)
    onnx.checker.check_model(model)
    onnx.save(model, a.out)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"{a.out}: {len(model.graph.node)} nodes, {params} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
