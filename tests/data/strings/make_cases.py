#!/usr/bin/env python3
"""Writes tests/data/strings/cases/: string-tensor models beyond ONNX's node
tests, each a folder as `slim conformance` reads them (model.onnx,
test_data_set_0/{input,output}_K.pb), with the outputs onnxruntime gives.

    .venv/bin/python tests/data/strings/make_cases.py

The `strings_vs_onnxruntime` ctest runs them. Cases: UTF-8 and empty
strings through every string operator, the element-moving operators on
strings (Gather, Concat, Transpose, Where, If, sequences...), Cast to and
from strings, and a chain whose string intermediates the executor frees
while numeric ones share the planner's arena.
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cases")
S = TP.STRING


def arr(values, shape=None):
    a = np.array(values, dtype=object)
    return a.reshape(shape) if shape is not None else a


def vi(name, elem, shape=None):
    if shape is None:  # an output: rank and dims left to inference
        t = helper.make_tensor_type_proto(elem, None)
        return helper.make_value_info(name, t)
    return helper.make_tensor_value_info(name, elem, shape)


def write(name, nodes, inputs, outputs, opset=20, ml=None, inits=(), oracle="ort"):
    ops = [helper.make_opsetid("", opset)]
    if ml:
        ops.append(helper.make_opsetid("ai.onnx.ml", ml))
    graph = helper.make_graph(nodes, name, [vi(n, t, v.shape) for n, t, _, v in inputs],
                              [vi(n, t) for n, t in outputs], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=ops)
    model.ir_version = 10
    feeds = {n: v for (n, _, _, v) in inputs}
    if oracle == "ort":
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = sess.run(None, feeds)
    else:
        got = ReferenceEvaluator(model).run(None, feeds)
    d = os.path.join(OUT, "test_" + name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for k, (n, _, _, v) in enumerate(inputs):
        onnx.save_tensor(numpy_helper.from_array(v, n),
                         os.path.join(d, "test_data_set_0", f"input_{k}.pb"))
    for k, ((n, _), v) in enumerate(zip(outputs, got)):
        if v.dtype.kind in "OUS":
            v = np.array([x.encode() if isinstance(x, str) else x for x in v.flat],
                         dtype=object).reshape(v.shape)
        onnx.save_tensor(numpy_helper.from_array(v, n),
                         os.path.join(d, "test_data_set_0", f"output_{k}.pb"))


def string_ops():
    utf = arr(["héllo", "", "日本語", "a\tb c", "ÄÖÜ straße", "Ωμέγα", "Привет"])
    write("concat_utf8_broadcast", [helper.make_node("StringConcat", ["x", "y"], ["z"])],
          [("x", S, None, utf.reshape(7, 1)), ("y", S, None, arr(["", "ü!"]))], [("z", S)])
    write("split_multichar_maxsplit",
          [helper.make_node("StringSplit", ["x"], ["y", "n"], delimiter="::", maxsplit=2)],
          [("x", S, None, arr(["a::b::c::d", "", "::", "日::本", "no"]))],
          [("y", S), ("n", TP.INT64)])
    write("split_whitespace_utf8", [helper.make_node("StringSplit", ["x"], ["y", "n"])],
          [("x", S, None, arr([["  é  ü ", ""], ["\t日本\n語 ", "x"]]))],
          [("y", S), ("n", TP.INT64)])
    write("regex_utf8_classes",
          [helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"\p{L}+(-\p{L}+)*")],
          [("x", S, None, arr(["héllo-wörld", "日本", "", "a--b", "Ωμέγα", "x1"]))],
          [("y", TP.BOOL)])
    # (a+)+$ backtracks 2^30 steps on a backtracking engine; RE2 is linear.
    write("regex_no_blowup", [helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"(a+)+$")],
          [("x", S, None, arr(["a" * 30 + "b", "a" * 30, "a" * 5000 + "!"]))], [("y", TP.BOOL)])
    write("equal_utf8_broadcast", [helper.make_node("Equal", ["x", "y"], ["z"])],
          [("x", S, None, arr([["é", ""], ["日本", "e"]])), ("y", S, None, arr(["é", "e"]))],
          [("z", TP.BOOL)], opset=19)
    for case, sw, action in [("lower_insensitive", 0, "LOWER"), ("upper_sensitive", 1, "UPPER"),
                             ("none_insensitive", 0, "NONE")]:
        write("normalizer_utf8_" + case,
              [helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action,
                                is_case_sensitive=sw, stopwords=["ÉTÉ", "the", "Ωμέγα"],
                                locale="C.UTF-8")],
              [("x", S, None, arr([["été", "The", "ÄÖÜ straße", "Привет Мир", "ΩΜΈΓΑ", "",
                                    "Ωμέγα", "ǅ İ ı ÿ µ"]]))], [("y", S)], opset=10)


def ml_ops():
    t = helper.make_tensor
    x = arr(["b", "é", "", "zz", "日本"])
    write("label_encoder_string_string",
          [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_strings=["é", "", "b", "é"], values_strings=["E", "empty", "B", "dup"],
                            default_string="?")],
          [("x", S, None, x)], [("y", S)], ml=2)
    write("label_encoder_int_string",
          [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=[1, 2, -7], values_strings=["one", "two", "minus"])],
          [("x", TP.INT64, None, np.array([[1, 5], [-7, 2]], np.int64))], [("y", S)], ml=2)
    write("label_encoder_string_float",
          [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_strings=["a", "b"], values_floats=[0.5, -2.0])],
          [("x", S, None, arr(["a", "c", "b"]))], [("y", TP.FLOAT)], ml=2)
    write("label_encoder_tensor_string_default",
          [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_tensor=t("k", TP.INT64, [3], [3, 1, 2]),
                            values_tensor=t("v", S, [3], [b"three", b"one", b"two"]),
                            default_tensor=t("d", S, [1], [b"none"]))],
          [("x", TP.INT64, None, np.array([1, 2, 3, 4], np.int64))], [("y", S)], ml=4)
    write("category_mapper_both",
          [helper.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml",
                            cats_strings=["cat", "dog", "日"], cats_int64s=[1, 2, 3], default_int64=99),
           helper.make_node("CategoryMapper", ["y"], ["z"], domain="ai.onnx.ml",
                            cats_strings=["cat", "dog", "日"], cats_int64s=[1, 2, 3],
                            default_string="UNK")],
          [("x", S, None, arr(["dog", "日", "bird", ""]))], [("y", TP.INT64), ("z", S)], ml=2)
    write("tfidf_strings",
          [helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF", min_gram_length=1,
                            max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3],
                            ngram_indexes=[0, 1, 2, 3, 4],
                            pool_strings=["a", "é", "日", "a", "é", "é", "日"],
                            weights=[1.0, 2.0, 3.0, 0.5, 0.25])],
          [("x", S, None, arr([["a", "é", "x", "日", "a", "é"], ["é", "日", "é", "a", "", "é"]]))],
          [("y", TP.FLOAT)], opset=9)


def casts():
    f = np.array([0.1, 1.0, 1e10, 1e-7, -0.0, np.nan, np.inf, -np.inf, 3.14159265, 123456789,
                  1.5e38, 100], np.float32)
    write("cast_float_to_string", [helper.make_node("Cast", ["x"], ["y"], to=S)],
          [("x", TP.FLOAT, None, f)], [("y", S)])
    write("cast_double_int_bool_to_string",
          [helper.make_node("Cast", ["d"], ["ds"], to=S), helper.make_node("Cast", ["i"], ["is"], to=S),
           helper.make_node("Cast", ["b"], ["bs"], to=S)],
          [("d", TP.DOUBLE, None, np.array([1 / 3, 1e100, -2.5], np.float64)),
           ("i", TP.INT32, None, np.array([0, -5, 2**31 - 1], np.int32)),
           ("b", TP.BOOL, None, np.array([True, False]))],
          [("ds", S), ("is", S), ("bs", S)])
    write("cast_string_to_numbers",
          [helper.make_node("Cast", ["x"], ["f"], to=TP.FLOAT),
           helper.make_node("Cast", ["x"], ["d"], to=TP.DOUBLE),
           helper.make_node("Cast", ["i"], ["l"], to=TP.INT64),
           helper.make_node("Cast", ["i"], ["u"], to=TP.UINT8),
           helper.make_node("Cast", ["i"], ["b"], to=TP.BOOL)],
          [("x", S, None, arr(["0.1", " 2", "1e3", "NaN", "INF", "-inf", "3abc", "-0"])),
           ("i", S, None, arr(["12", "-3", " 7", "+4", "300", "1.5"]))],
          [("f", TP.FLOAT), ("d", TP.DOUBLE), ("l", TP.INT64), ("u", TP.UINT8), ("b", TP.BOOL)])


def castlike():
    write("castlike_to_and_from_string",
          [helper.make_node("CastLike", ["x", "like_s"], ["s"]),
           helper.make_node("CastLike", ["s", "like_f"], ["f"])],
          [("x", TP.FLOAT, None, np.array([1.5, -0.25, 1e20], np.float32)),
           ("like_s", S, None, arr(["?"])), ("like_f", TP.DOUBLE, None, np.array([0.0]))],
          [("s", S), ("f", TP.DOUBLE)], opset=19)


def movers():
    x = arr(["a", "", "日本", "dé", "long string " * 3, "z"], (2, 3))
    idx = np.array([1, 0, 1], np.int64)
    write("gather_concat_transpose",
          [helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
           helper.make_node("Transpose", ["g"], ["t"], perm=[1, 0]),
           helper.make_node("Concat", ["t", "t"], ["c"], axis=1),
           helper.make_node("Reshape", ["c", "s"], ["r"]),
           helper.make_node("Slice", ["r", "st", "en"], ["y"])],
          [("x", S, None, x), ("i", TP.INT64, None, idx),
           ("s", TP.INT64, None, np.array([-1], np.int64)),
           ("st", TP.INT64, None, np.array([2], np.int64)),
           ("en", TP.INT64, None, np.array([15], np.int64))],
          [("y", S)], oracle="ref")
    # onnx's reference evaluator, not onnxruntime: onnxruntime 1.32 gives ""
    # for the 36-byte element after Transpose + Concat (its elements 4-12
    # come out empty), where numpy's take/transpose/concatenate keep it.
    write("expand_where_tile_squeeze",
          [helper.make_node("Expand", ["x", "sh"], ["e"]),
           helper.make_node("Where", ["c", "e", "o"], ["w"]),
           helper.make_node("Tile", ["w", "rep"], ["t"]),
           helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
           helper.make_node("Squeeze", ["u", "ax"], ["q"]),
           helper.make_node("Identity", ["q"], ["y"]),
           helper.make_node("Shape", ["q"], ["shape"])],
          [("x", S, None, arr(["é", "x"], (1, 2))), ("sh", TP.INT64, None, np.array([3, 2], np.int64)),
           ("c", TP.BOOL, None, np.array([[True, False], [False, True], [True, True]])),
           ("o", S, None, arr(["other"])), ("rep", TP.INT64, None, np.array([1, 2], np.int64)),
           ("ax", TP.INT64, None, np.array([0], np.int64))],
          [("y", S), ("shape", TP.INT64)])
    write("split_gatherelements_flatten",
          [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
           helper.make_node("GatherElements", ["x", "gi"], ["ge"], axis=1),
           helper.make_node("Flatten", ["ge"], ["f"], axis=0)],
          [("x", S, None, arr(["p", "q", "r", "s", "t", "ü"], (2, 3)).repeat(2, axis=1)[:, :4]),
           ("gi", TP.INT64, None, np.array([[3, 0], [1, 1]], np.int64))],
          [("a", S), ("b", S), ("f", S)], opset=18)
    then = helper.make_graph([helper.make_node("StringConcat", ["x", "sfx"], ["o"])], "then", [],
                             [vi("o", S)],
                             initializer=[helper.make_tensor("sfx", S, [], [b"!yes"])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "else", [], [vi("o", S)])
    write("if_string_branches",
          [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
          [("c", TP.BOOL, None, np.array(True)), ("x", S, None, arr(["é", ""]))], [("y", S)])
    write("sequence_of_strings",
          [helper.make_node("SequenceConstruct", ["x", "x2"], ["s"]),
           helper.make_node("SequenceAt", ["s", "k"], ["a"]),
           helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0)],
          [("x", S, None, arr(["é", "b"])), ("x2", S, None, arr(["日"])),
           ("k", TP.INT64, None, np.array(1, np.int64))],
          [("a", S), ("c", S)])


def loops_and_sequences():
    # A Loop whose scan output stacks strings each iteration made (the
    # iterations' tensors are gone when the stacked output is used).
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("StringConcat", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", S, [2])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", S, [2]), vi("scan", S, [2])])
    write("loop_string_scan",
          [helper.make_node("Loop", ["n", "c", "a"], ["final", "stacked"], body=body)],
          [("n", TP.INT64, None, np.array(3, np.int64)), ("c", TP.BOOL, None, np.array(True)),
           ("a", S, None, arr(["", "é"])), ("x", S, None, arr(["ab", "日"]))],
          [("final", S), ("stacked", S)], opset=20)
    # (SplitToSequence then ConcatFromSequence is checked against onnxruntime
    # in tests/e2e/test_control_flow.py, for any dtype's shapes.)
    write("sequence_insert_compress_gathernd",
          [helper.make_node("SequenceConstruct", ["x"], ["s"]),
           helper.make_node("SequenceInsert", ["s", "y"], ["s2"]),
           helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
           helper.make_node("Compress", ["c", "m"], ["k"], axis=0),
           helper.make_node("GatherND", ["x", "idx"], ["g"])],
          [("x", S, None, arr(["a", "bé", "", "日本語"], (2, 2))), ("y", S, None, arr(["z", "w"], (1, 2))),
           ("m", TP.BOOL, None, np.array([True, False, True])),
           ("idx", TP.INT64, None, np.array([[1, 1], [0, 0]], np.int64))],
          [("k", S), ("g", S)], opset=18)


def planner_chain():
    # Strings made and dropped step by step beside a numeric chain the
    # planner lays out in its arena (slots reused): each string value is
    # freed after its last reader.
    nodes, prev = [], "x"
    for k in range(6):
        nodes.append(helper.make_node("StringConcat", [prev, prev], [f"s{k}"]))
        prev = f"s{k}"
    nodes += [helper.make_node("RegexFullMatch", [prev], ["m"], pattern="(ab)+"),
              helper.make_node("Cast", ["m"], ["mf"], to=TP.FLOAT),
              helper.make_node("Add", ["mf", "n"], ["a0"]),
              helper.make_node("Mul", ["a0", "a0"], ["a1"]),
              helper.make_node("Add", ["a1", "n"], ["a2"]),
              helper.make_node("Cast", ["a2"], ["y"], to=S)]
    write("planner_chain", nodes,
          [("x", S, None, arr(["ab", "a", ""] * 50)), ("n", TP.FLOAT, None,
                                                      np.arange(150, dtype=np.float32))],
          [("y", S)])


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    string_ops()
    ml_ops()
    casts()
    castlike()
    movers()
    loops_and_sequences()
    planner_chain()
    print("wrote", len(os.listdir(OUT)), "cases to", OUT)


if __name__ == "__main__":
    main()
