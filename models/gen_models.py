#!/usr/bin/env python3
"""Writes slimserve's example models as a Triton-style model repository.

    python3 models/gen_models.py DIR [--no-check]

gives, for each of mlp, resnet and transformer:

    DIR/<name>/config.json        {"name": ..., "platform": "onnx", "max_batch_size": 32, ...}
    DIR/<name>/1/model.onnx       opset 17, batch dimension named "batch"
    DIR/<name>/sample_input.npy   a batch of 2

The weights come from a fixed seed, so the files are the same on every run.
Each model is checked with onnx.checker (with shape inference) and run in
onnxruntime on its sample input unless --no-check is given.

All constants (Reshape shapes, scale factors) are initializers rather than
Constant nodes, so "parameters" means the same thing everywhere: the total
element count of the initializers.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that came with opset 17; readable by older runtimes
MAX_BATCH = 32


class GraphBuilder:
    """Collects nodes and initializers with unique, readable names."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.counter = {}

    def fresh(self, prefix):
        n = self.counter.get(prefix, 0)
        self.counter[prefix] = n + 1
        return f"{prefix}_{n}"

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name, shape, fan_in):
        """He-style normal weights: keeps activations O(1) through the layers."""
        w = self.rng.standard_normal(shape).astype(np.float32) * np.float32(math.sqrt(2.0 / fan_in))
        return self.const(name, w)

    def bias(self, name, n, scale=0.1):
        return self.const(name, (self.rng.standard_normal(n) * scale).astype(np.float32))

    def op(self, op_type, inputs, name=None, **attrs):
        node_name = name or self.fresh(op_type.lower())
        out = node_name + "_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=node_name, **attrs))
        return out

    def finish(self, inputs, outputs):
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="slimserve-gen_models",
            producer_version="1",
        )
        model.ir_version = IR_VERSION
        return model


def rename_last_output(b, new_name):
    """Gives the final node's output a stable public name."""
    b.nodes[-1].output[0] = new_name
    return new_name


# ---- MLP classifier: 784 -> 256 -> 128 -> 10 --------------------------------

def make_mlp():
    b = GraphBuilder("mlp", seed=1)
    x = "input"
    # Layer 1 as PyTorch exports Linear: Gemm with W stored [out, in], transB=1.
    w1 = b.weight("fc1.weight", (256, 784), 784)
    h = b.op("Gemm", [x, w1, b.bias("fc1.bias", 256)], name="fc1", transB=1)
    h = b.op("Relu", [h], name="relu1")
    # Layer 2 as MatMul + Add, the other common export.
    w2 = b.weight("fc2.weight", (256, 128), 256)
    h = b.op("MatMul", [h, w2], name="fc2_matmul")
    h = b.op("Add", [h, b.bias("fc2.bias", 128)], name="fc2_add")
    h = b.op("Relu", [h], name="relu2")
    w3 = b.weight("fc3.weight", (128, 10), 128)
    h = b.op("Gemm", [h, w3, b.bias("fc3.bias", 10)], name="fc3")
    b.op("Softmax", [h], name="softmax", axis=-1)
    out = rename_last_output(b, "probs")
    model = b.finish(
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 784])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 10])],
    )
    sample = np.random.default_rng(101).random((2, 784), dtype=np.float32)
    return model, sample


# ---- small ResNet-style CNN on [batch,3,32,32] ------------------------------

def conv_bn(b, x, c_in, c_out, k, stride, name, relu=True):
    w = b.weight(f"{name}.conv.weight", (c_out, c_in, k, k), c_in * k * k)
    pad = k // 2
    y = b.op("Conv", [x, w], name=f"{name}.conv", kernel_shape=[k, k],
             strides=[stride, stride], pads=[pad, pad, pad, pad])
    scale = b.const(f"{name}.bn.weight", (1.0 + 0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
    shift = b.const(f"{name}.bn.bias", (0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
    mean = b.const(f"{name}.bn.running_mean", (0.1 * b.rng.standard_normal(c_out)).astype(np.float32))
    var = b.const(f"{name}.bn.running_var", b.rng.uniform(0.5, 1.5, c_out).astype(np.float32))
    y = b.op("BatchNormalization", [y, scale, shift, mean, var], name=f"{name}.bn", epsilon=1e-5)
    if relu:
        y = b.op("Relu", [y], name=f"{name}.relu")
    return y


def residual_block(b, x, c_in, c_out, stride, name):
    y = conv_bn(b, x, c_in, c_out, 3, stride, f"{name}.a")
    y = conv_bn(b, y, c_out, c_out, 3, 1, f"{name}.b", relu=False)
    if stride != 1 or c_in != c_out:
        x = conv_bn(b, x, c_in, c_out, 1, stride, f"{name}.shortcut", relu=False)
    y = b.op("Add", [y, x], name=f"{name}.add")
    return b.op("Relu", [y], name=f"{name}.relu")


def make_resnet():
    b = GraphBuilder("resnet", seed=2)
    x = "image"
    h = conv_bn(b, x, 3, 32, 3, 1, "stem")                        # [b,32,32,32]
    h = residual_block(b, h, 32, 32, 1, "layer1")                 # [b,32,32,32]
    h = b.op("MaxPool", [h], name="pool", kernel_shape=[2, 2], strides=[2, 2])  # 16x16
    h = residual_block(b, h, 32, 64, 2, "layer2")                 # [b,64,8,8]
    h = residual_block(b, h, 64, 64, 1, "layer3")                 # [b,64,8,8]
    h = b.op("GlobalAveragePool", [h], name="gap")                # [b,64,1,1]
    h = b.op("Flatten", [h], name="flatten", axis=1)              # [b,64]
    w = b.weight("fc.weight", (10, 64), 64)
    b.op("Gemm", [h, w, b.bias("fc.bias", 10)], name="fc", transB=1)
    out = rename_last_output(b, "logits")
    model = b.finish(
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 10])],
    )
    sample = np.random.default_rng(102).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return model, sample


# ---- small transformer encoder: token ids [batch,16] -> [batch,16,64] -------

VOCAB, SEQ, D_MODEL, HEADS, D_FF, LAYERS = 1000, 16, 64, 4, 128, 2


def layer_norm(b, x, name):
    scale = b.const(f"{name}.weight", (1.0 + 0.1 * b.rng.standard_normal(D_MODEL)).astype(np.float32))
    shift = b.const(f"{name}.bias", (0.1 * b.rng.standard_normal(D_MODEL)).astype(np.float32))
    return b.op("LayerNormalization", [x, scale, shift], name=name, axis=-1, epsilon=1e-5)


def linear(b, x, d_in, d_out, name):
    w = b.weight(f"{name}.weight", (d_in, d_out), d_in)
    y = b.op("MatMul", [x, w], name=f"{name}.matmul")
    return b.op("Add", [y, b.bias(f"{name}.bias", d_out)], name=f"{name}.add")


def attention(b, x, name):
    d_head = D_MODEL // HEADS
    split_shape = b.const(f"{name}.split_shape", np.array([0, 0, HEADS, d_head], np.int64))
    merge_shape = b.const(f"{name}.merge_shape", np.array([0, 0, D_MODEL], np.int64))
    scale = b.const(f"{name}.scale", np.array(1.0 / math.sqrt(d_head), np.float32))

    def heads(which, perm):  # [b,s,d] -> [b,h,s,dh] (or [b,h,dh,s] for keys)
        proj = linear(b, x, D_MODEL, D_MODEL, f"{name}.{which}")
        y = b.op("Reshape", [proj, split_shape], name=f"{name}.{which}.split")
        return b.op("Transpose", [y], name=f"{name}.{which}.heads", perm=perm)

    q = heads("q", [0, 2, 1, 3])
    k = heads("k", [0, 2, 3, 1])
    v = heads("v", [0, 2, 1, 3])
    scores = b.op("MatMul", [q, k], name=f"{name}.scores")           # [b,h,s,s]
    scores = b.op("Mul", [scores, scale], name=f"{name}.scale_scores")
    probs = b.op("Softmax", [scores], name=f"{name}.softmax", axis=-1)
    ctx = b.op("MatMul", [probs, v], name=f"{name}.context")         # [b,h,s,dh]
    ctx = b.op("Transpose", [ctx], name=f"{name}.unheads", perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, merge_shape], name=f"{name}.merge")  # [b,s,d]
    return linear(b, ctx, D_MODEL, D_MODEL, f"{name}.out")


def gelu(b, x, name):
    """0.5 * x * (1 + erf(x / sqrt(2))), as PyTorch exports nn.GELU at opset 17."""
    inv_sqrt2 = b.const(f"{name}.inv_sqrt2", np.array(1.0 / math.sqrt(2.0), np.float32))
    one = b.const(f"{name}.one", np.array(1.0, np.float32))
    half = b.const(f"{name}.half", np.array(0.5, np.float32))
    e = b.op("Erf", [b.op("Mul", [x, inv_sqrt2], name=f"{name}.div")], name=f"{name}.erf")
    e = b.op("Add", [e, one], name=f"{name}.add_one")
    y = b.op("Mul", [x, e], name=f"{name}.mul")
    return b.op("Mul", [y, half], name=f"{name}.half_mul")


def make_transformer():
    b = GraphBuilder("transformer", seed=3)
    tokens = "tokens"
    emb = b.const("embed.weight", (b.rng.standard_normal((VOCAB, D_MODEL)) * 0.5).astype(np.float32))
    pos = b.const("pos_embed", (b.rng.standard_normal((SEQ, D_MODEL)) * 0.1).astype(np.float32))
    h = b.op("Gather", [emb, tokens], name="embed", axis=0)           # [b,s,d]
    h = b.op("Add", [h, pos], name="add_pos")
    for i in range(LAYERS):
        name = f"layer{i}"
        a = attention(b, layer_norm(b, h, f"{name}.ln1"), f"{name}.attn")
        h = b.op("Add", [h, a], name=f"{name}.residual1")
        f = linear(b, layer_norm(b, h, f"{name}.ln2"), D_MODEL, D_FF, f"{name}.ff1")
        f = linear(b, gelu(b, f, f"{name}.gelu"), D_FF, D_MODEL, f"{name}.ff2")
        h = b.op("Add", [h, f], name=f"{name}.residual2")
    layer_norm(b, h, "final_ln")
    out = rename_last_output(b, "hidden")
    model = b.finish(
        [helper.make_tensor_value_info(tokens, TensorProto.INT64, ["batch", SEQ])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", SEQ, D_MODEL])],
    )
    sample = np.random.default_rng(103).integers(0, VOCAB, (2, SEQ), dtype=np.int64)
    return model, sample


MODELS = {"mlp": make_mlp, "resnet": make_resnet, "transformer": make_transformer}

TRITON_TYPES = {TensorProto.FLOAT: "TYPE_FP32", TensorProto.INT64: "TYPE_INT64"}


def io_config(values):
    """Triton-style tensor list; dims exclude the batch dimension."""
    out = []
    for v in values:
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim[1:]]
        out.append({"name": v.name, "data_type": TRITON_TYPES[v.type.tensor_type.elem_type],
                    "dims": dims})
    return out


def check(model, sample, name):
    onnx.checker.check_model(model, full_check=True)
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"  {name}: onnxruntime not installed, skipped the run check", file=sys.stderr)
        return
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (result,) = sess.run(None, {model.graph.input[0].name: sample})
    if not np.all(np.isfinite(result)):
        raise RuntimeError(f"{name}: onnxruntime output has non-finite values")
    print(f"  {name}: onnxruntime ok, output {result.dtype} {list(result.shape)}, "
          f"range [{result.min():.4g}, {result.max():.4g}]")


def write_model(root, name, model, sample):
    model_dir = os.path.join(root, name)
    os.makedirs(os.path.join(model_dir, "1"), exist_ok=True)
    onnx.save(model, os.path.join(model_dir, "1", "model.onnx"))
    np.save(os.path.join(model_dir, "sample_input.npy"), sample)
    config = {
        "name": name,
        "platform": "onnx",
        "max_batch_size": MAX_BATCH,
        "input": io_config(model.graph.input),
        "output": io_config(model.graph.output),
    }
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="model repository to write into")
    ap.add_argument("--no-check", action="store_true", help="skip onnx.checker / onnxruntime")
    ap.add_argument("--only", action="append", choices=sorted(MODELS),
                    help="write only this model (repeatable)")
    args = ap.parse_args()
    for name in args.only or MODELS:
        model, sample = MODELS[name]()
        if not args.no_check:
            check(model, sample, name)
        write_model(args.dir, name, model, sample)
        params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
        print(f"{name}: {len(model.graph.node)} nodes, {params} parameters -> "
              f"{os.path.join(args.dir, name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
