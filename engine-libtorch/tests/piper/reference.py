"""onnxruntime's side of tests/piper_model.rs: Piper's own tools on the voice's own .onnx file.

Run with .venv-piper's python (scripts/setup-piper.sh: piper-tts, onnxruntime, onnx).

  reference.py prepare VOICE DIR   phonemizes the test sentences with piper-tts (DIR/ids.json) and
                                   writes DIR/multi.onnx, a multi-speaker copy of VOICE (below)
  reference.py run DIR             runs the cases of DIR/cases.json through onnxruntime, one thread,
                                   and writes DIR/out_<i>.f32 (audio) and DIR/out.json (durations)
  reference.py bench VOICE         onnxruntime's real-time factor on one thread, piper-tts's way
                                   (a plain session of the file), on the test sentences
  reference.py ids VOICE OUT TEXT...
                                   phonemizes each TEXT with piper-tts into OUT (a JSON list of
                                   id lists): the int8 quality check's held-out sentences

Noise. The export draws two RandomNormalLike tensors (the duration predictor's [1, 2, L] and the
prior's [1, C, T]). The cases with noise run an edited copy of the graph in which those two
nodes read graph inputs instead, fed with the noise PiperModel used (written by the Rust side:
the prior's for more frames than needed, sliced to T inside the graph, T being known only
there). The cases without noise (noise_scale = noise_w = 0) run the graph with its own
RandomNormalLike nodes (times 0). Every case's graph also outputs the ceiled durations (the
graph's only Ceil).

The multi-speaker copy: joe is single-speaker, so speakers are added where VITS adds them for a
multi-speaker voice, with random weights (seeded): a `sid` input, an `emb_g.weight` table
[speakers, gin], and the 1×1 conditioning convolutions `dp.cond` (added after `dp.pre`),
`flow.flows.N.enc.cond_layer` (one per coupling layer, its weight named `onnx::Conv_…` as the
exporter names folded weight-normalised weights, each WaveNet layer adding its slice of 2·hidden
channels after its in_layer) and `dec.cond` (added after `dec.conv_pre`). The text embedding,
which the single-speaker export calls `sid`, becomes `enc_p.emb.weight`, as in a multi-speaker
export.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech needs a fast vocoder, and this one runs on a single core!",
    "How much wood would a woodchuck chuck?",
]
SPEAKERS = 4
GIN = 64


def phonemize(voice_path, sentences=SENTENCES):
    from piper import PiperVoice

    voice = PiperVoice.load(voice_path)
    out = []
    for s in sentences:
        ids = []
        for sentence in voice.phonemize(s):
            ids += voice.phonemes_to_ids(sentence)
        out.append(ids)
    return out


def session(model, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(
        model if isinstance(model, (str, bytes)) else model.SerializeToString(),
        sess_options=so,
        providers=["CPUExecutionProvider"],
    )


def consumers(graph, value):
    return [n for n in graph.node if value in n.input]


def rewire(graph, old, new, skip):
    """Every consumer of `old` but `skip` reads `new` instead."""
    for n in graph.node:
        if n is skip:
            continue
        for i, v in enumerate(n.input):
            if v == old:
                n.input[i] = new


def const_i64(graph, name, values):
    graph.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


def node_named(graph, name):
    for n in graph.node:
        if n.name == name:
            return n
    raise KeyError(name)


def add_after(graph, producer_name, addend, tag):
    """Adds `addend` to the output of node `producer_name`, for all its consumers."""
    p = node_named(graph, producer_name)
    out = p.output[0]
    summed = f"{out}_plus_{tag}"
    add = helper.make_node("Add", [out, addend], [summed], name=f"{producer_name}_plus_{tag}")
    rewire(graph, out, summed, add)
    idx = list(graph.node).index(p)
    graph.node.insert(idx + 1, add)


def with_speakers(model):
    """The multi-speaker copy (see the module's notes)."""
    rng = np.random.default_rng(1234)
    g = model.graph
    # the text embedding's real name, freeing `sid` for the input
    for t in g.initializer:
        if t.name == "sid":
            t.name = "enc_p.emb.weight"
    for n in g.node:
        for i, v in enumerate(n.input):
            if v == "sid":
                n.input[i] = "enc_p.emb.weight"
    g.input.append(helper.make_tensor_value_info("sid", TensorProto.INT64, ["batch_size"]))
    inits = {t.name: t for t in g.initializer}
    hidden = numpy_helper.to_array(inits["flow.flows.0.pre.bias"]).shape[0]
    up0 = numpy_helper.to_array(inits["dec.conv_pre.bias"]).shape[0]
    dp_ch = numpy_helper.to_array(inits["dp.pre.bias"]).shape[0]

    def weight(name, shape, scale):
        g.initializer.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    first = []  # nodes that depend on inputs and initializers only, put first
    weight("emb_g.weight", (SPEAKERS, GIN), 1.0)
    first.append(helper.make_node("Gather", ["emb_g.weight", "sid"], ["g_flat"], name="/emb_g/Gather"))
    first.append(helper.make_node("Unsqueeze", ["g_flat", const_i64(g, "g_axes", [2])], ["g"], name="/Unsqueeze_g"))

    def cond(module, out_ch, weight_name):
        w = weight(weight_name, (out_ch, GIN, 1), 0.02)
        b = weight(f"{module}.bias", (out_ch,), 0.02)
        out = f"/{module.replace('.', '/')}/Conv_output_0"
        first.append(helper.make_node("Conv", ["g", w, b], [out], name=f"/{module.replace('.', '/')}/Conv", kernel_shape=[1]))
        return out

    add_after(g, "/dp/pre/Conv", cond("dp.cond", dp_ch, "dp.cond.weight"), "cond")
    add_after(g, "/dec/conv_pre/Conv", cond("dec.cond", up0, "dec.cond.weight"), "cond")
    for f in range(0, 100, 2):
        if f"flow.flows.{f}.pre.bias" not in inits:
            break
        layers = sum(1 for i in range(100) if f"flow.flows.{f}.enc.in_layers.{i}.bias" in inits)
        out = cond(f"flow.flows.{f}.enc.cond_layer", 2 * hidden * layers, f"onnx::Conv_{90000 + f}")
        for i in range(layers):
            sl = f"{out}_slice_{i}"
            first.append(
                helper.make_node(
                    "Slice",
                    [
                        out,
                        const_i64(g, f"{sl}_s", [2 * hidden * i]),
                        const_i64(g, f"{sl}_e", [2 * hidden * (i + 1)]),
                        const_i64(g, f"{sl}_a", [1]),
                    ],
                    [sl],
                    name=f"{sl}_node",
                )
            )
            add_after(g, f"/flow/flows.{f}/enc/in_layers.{i}/Conv", sl, "cond")
    for n in reversed(first):
        g.node.insert(0, n)
    return model


def with_fed_noise(model):
    """The two RandomNormalLike nodes read the inputs `dp_noise` [1, 2, L] and `prior_noise`
    [1, C, T_max] (sliced to T)."""
    g = model.graph
    random = [n for n in g.node if n.op_type == "RandomNormalLike"]
    assert len(random) == 2, f"{len(random)} RandomNormalLike nodes"
    for n in random:
        idx = list(g.node).index(n)
        g.node.remove(n)
        if n.name.startswith("/dp/"):
            g.node.insert(idx, helper.make_node("Identity", ["dp_noise"], [n.output[0]], name=n.name))
        else:
            g.node.insert(idx, helper.make_node("Shape", [n.input[0]], ["prior_T"], name="/prior_T", start=2, end=3))
            g.node.insert(
                idx + 1,
                helper.make_node(
                    "Slice",
                    ["prior_noise", const_i64(g, "prior_s", [0]), "prior_T", const_i64(g, "prior_a", [2])],
                    [n.output[0]],
                    name=n.name,
                ),
            )
    g.input.append(helper.make_tensor_value_info("dp_noise", TensorProto.FLOAT, [1, 2, "phonemes"]))
    g.input.append(helper.make_tensor_value_info("prior_noise", TensorProto.FLOAT, [1, None, None]))
    return model


def with_durations(model):
    """The ceiled durations (the graph's only Ceil) as a second output."""
    g = model.graph
    (ceil,) = [n for n in g.node if n.op_type == "Ceil"]
    g.output.append(helper.make_tensor_value_info(ceil.output[0], TensorProto.FLOAT, None))
    return model


def prepare(voice, out_dir):
    out_dir = Path(out_dir)
    (out_dir / "ids.json").write_text(json.dumps(phonemize(voice)))
    onnx.save(with_speakers(onnx.load(voice)), str(out_dir / "multi.onnx"))


def run(out_dir):
    out_dir = Path(out_dir)
    spec = json.loads((out_dir / "cases.json").read_text())
    sessions = {}
    results = []
    for i, case in enumerate(spec["cases"]):
        model_path, fed = case["model"], case["noise"] is not None
        key = (model_path, fed)
        if key not in sessions:
            model = with_durations(onnx.load(model_path))
            sessions[key] = session(with_fed_noise(model) if fed else model)
        sess = sessions[key]
        ids = np.array([case["ids"]], dtype=np.int64)
        feeds = {
            "input": ids,
            "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
            "scales": np.array(case["scales"], dtype=np.float32),
        }
        if case["speaker"] is not None:
            feeds["sid"] = np.array([case["speaker"]], dtype=np.int64)
        if fed:
            noise = case["noise"]
            feeds["dp_noise"] = np.fromfile(out_dir / noise["dp"], dtype=np.float32).reshape(1, 2, -1)
            feeds["prior_noise"] = np.fromfile(out_dir / noise["prior"], dtype=np.float32).reshape(
                1, noise["channels"], -1
            )
        outs = sess.run(None, feeds)
        audio = outs[0].reshape(-1).astype(np.float32)
        audio.tofile(out_dir / f"out_{i}.f32")
        durations = outs[1].reshape(-1).astype(np.int64).tolist()
        results.append({"samples": int(audio.size), "shape": list(outs[0].shape), "durations": durations})
    (out_dir / "out.json").write_text(json.dumps(results))


def bench(voice):
    ids = phonemize(voice)
    sess = session(voice, threads=1)
    total_audio = total_time = 0.0
    for seq in ids:
        feeds = {
            "input": np.array([seq], dtype=np.int64),
            "input_lengths": np.array([len(seq)], dtype=np.int64),
            "scales": np.array([0.667, 1.0, 0.8], dtype=np.float32),
        }
        sess.run(None, feeds)
        # the lengths vary with the noise: the best time per second of audio
        rtf = min(timed(sess, feeds) for _ in range(5))
        seconds = sess.run(None, feeds)[0].size / 22050
        total_audio += seconds
        total_time += rtf * seconds
        print(f"onnxruntime 1 thread: {len(seq)} ids, ~{seconds:.2f} s of audio, best RTF of 5 {rtf:.4f}")
    print(f"onnxruntime 1 thread: all sentences RTF {total_time / total_audio:.4f}")


def timed(sess, feeds):
    """Seconds per second of audio of one run."""
    t = time.perf_counter()
    out = sess.run(None, feeds)[0]
    return (time.perf_counter() - t) / (out.size / 22050)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif cmd == "run":
        run(sys.argv[2])
    elif cmd == "bench":
        bench(sys.argv[2])
    elif cmd == "ids":
        Path(sys.argv[3]).write_text(json.dumps(phonemize(sys.argv[2], sys.argv[4:])))
    else:
        raise SystemExit(f"unknown command {cmd}")
