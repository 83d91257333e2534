#!/usr/bin/env python3
"""A BERT-base-sized encoder as ONNX, with trained-like weights.

    python3 bench/gen_encoder.py OUT.onnx [--layers 12] [--hidden 768] [--heads 12]
                                 [--ffn 3072] [--seq 128] [--vocab 30522]
                                 [--spelled-layernorm]

Token ids [batch, seq] (int64) -> hidden states [batch, seq, hidden] (float32),
written the way PyTorch exports BERT at opset 17: MatMul + Add projections,
Reshape/Transpose heads, MatMul/Mul/Softmax/MatMul attention, Erf GELU,
LayerNormalization. The defaults are BERT-base: 12 layers, hidden 768, 12
heads, 3072 feed-forward, 30522 tokens, sequence 128 (about 436 MB of fp32
weights). --spelled-layernorm writes each LayerNorm as PyTorch exports it
below opset 17 (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul
gamma, Add beta, its scalars as Constant nodes); the function is the same.

Random Gaussian weights hide precision problems, so the weights look
trained: Student-t (3 degrees of freedom) entries scaled to 1/sqrt(fan_in),
and in each projection a few input channels (1 in 64) scaled up 8x, the
outlier features that trained transformers grow and that break naive fp16
and int8 paths.
"""

import argparse
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed, spelled_layernorm=False):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0
        self.spelled_layernorm = spelled_layernorm

    def constant(self, arr):
        """A Constant node, as torch.onnx writes a Python scalar."""
        self.count += 1
        out = f"constant_{self.count}"
        self.nodes.append(helper.make_node(
            "Constant", [], [out], name=out, value=numpy_helper.from_array(np.asarray(arr))))
        return out

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, **attrs):
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def weight(self, name, d_in, d_out):
        w = self.rng.standard_t(3, (d_in, d_out)) / math.sqrt(3 * d_in)
        outliers = self.rng.choice(d_in, max(1, d_in // 64), replace=False)
        w[outliers, :] *= 8.0
        return self.const(name, w.astype(np.float32))

    def linear(self, x, d_in, d_out, name):
        y = self.op("MatMul", [x, self.weight(f"{name}.weight", d_in, d_out)])
        bias = (0.02 * self.rng.standard_normal(d_out)).astype(np.float32)
        return self.op("Add", [y, self.const(f"{name}.bias", bias)])

    def layer_norm(self, x, d, name):
        scale = (1.0 + 0.1 * self.rng.standard_normal(d)).astype(np.float32)
        shift = (0.05 * self.rng.standard_normal(d)).astype(np.float32)
        gamma, beta = self.const(f"{name}.weight", scale), self.const(f"{name}.bias", shift)
        if self.spelled_layernorm:
            mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
            dev = self.op("Sub", [x, mean])
            var = self.op("ReduceMean", [self.op("Pow", [dev, self.constant(np.float32(2.0))])],
                          axes=[-1], keepdims=1)
            std = self.op("Sqrt", [self.op("Add", [var, self.constant(np.float32(1e-12))])])
            return self.op("Add", [self.op("Mul", [self.op("Div", [dev, std]), gamma]), beta])
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)


def build(layers, hidden, heads, ffn, seq, vocab, seed=7, spelled_layernorm=False):
    b = Builder(seed, spelled_layernorm)
    d_head = hidden // heads
    emb = (b.rng.standard_t(3, (vocab, hidden)) * 0.05).astype(np.float32)
    pos = (b.rng.standard_normal((seq, hidden)) * 0.02).astype(np.float32)
    h = b.op("Gather", [b.const("embeddings.word", emb), "input_ids"], axis=0)
    h = b.op("Add", [h, b.const("embeddings.position", pos)])
    h = b.layer_norm(h, hidden, "embeddings.ln")
    split = b.const("split_shape", np.array([0, 0, heads, d_head], np.int64))
    merge = b.const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = b.const("attn_scale", np.array(1.0 / math.sqrt(d_head), np.float32))
    inv_sqrt2 = b.const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    one = b.const("one", np.array(1.0, np.float32))
    half = b.const("half", np.array(0.5, np.float32))
    for i in range(layers):
        n = f"layer{i}"

        def heads_of(which, perm):
            y = b.op("Reshape", [b.linear(h, hidden, hidden, f"{n}.{which}"), split])
            return b.op("Transpose", [y], perm=perm)

        q = heads_of("query", [0, 2, 1, 3])
        k = heads_of("key", [0, 2, 3, 1])
        v = heads_of("value", [0, 2, 1, 3])
        s = b.op("Mul", [b.op("MatMul", [q, k]), scale])
        p = b.op("Softmax", [s], axis=-1)
        c = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
        c = b.op("Reshape", [c, merge])
        a = b.linear(c, hidden, hidden, f"{n}.attn_out")
        h = b.layer_norm(b.op("Add", [h, a]), hidden, f"{n}.ln1")
        f = b.linear(h, hidden, ffn, f"{n}.ffn_in")
        e = b.op("Add", [b.op("Erf", [b.op("Mul", [f, inv_sqrt2])]), one])
        f = b.op("Mul", [b.op("Mul", [f, e]), half])
        f = b.linear(f, ffn, hidden, f"{n}.ffn_out")
        h = b.layer_norm(b.op("Add", [h, f]), hidden, f"{n}.ln2")
    b.nodes[-1].output[0] = "last_hidden_state"
    graph = helper.make_graph(
        b.nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", seq, hidden])],
        initializer=b.inits)
    # Spelled out, the model is what an exporter writes below opset 17.
    opset = 14 if spelled_layernorm else 17
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="slimserve-bench")
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--spelled-layernorm", action="store_true",
                    help="LayerNorm as ReduceMean/Sub/Pow/.../Add, as exported below opset 17")
    a = ap.parse_args()
    model = build(a.layers, a.hidden, a.heads, a.ffn, a.seq, a.vocab,
                  spelled_layernorm=a.spelled_layernorm)
    onnx.save(model, a.out)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"{a.out}: {len(model.graph.node)} nodes, {params} parameters "
          f"({params * 4 / 2**20:.0f} MiB fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
