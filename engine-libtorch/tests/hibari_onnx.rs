//! Checks against the real `hibari.onnx` (from scripts/setup-voice.sh). Fails with a message telling
//! to run the set-up when the cache is absent (CI runs it).

use std::path::PathBuf;

use speechstream_engine_libtorch::{linear_weights, parameters, DataType, Model};

fn hibari_onnx() -> Option<PathBuf> {
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
    let path = cache.join("hibari/hibari.onnx");
    assert!(path.is_file(), "{} not found: run scripts/setup-voice.sh first", path.display());
    Some(path)
}

#[test]
fn reads_the_shipped_int8_model() {
    let Some(path) = hibari_onnx() else { return };
    let model = Model::load(&path).unwrap();
    assert_eq!(model.opsets, vec![(String::new(), 17)]);
    assert_eq!(model.graph.inputs, vec!["ids", "speed"]);
    assert_eq!(model.graph.outputs, vec!["lh", "theta", "ln", "lr", "phi", "f0"]);
    assert_eq!(model.graph.nodes.len(), 1731);

    // 161 named float parameters + 45 int8 matrices, each with a float scale and an int8 zero point.
    let inits = &model.graph.initializers;
    assert_eq!(inits.len(), 296);
    assert_eq!(inits.iter().filter(|t| t.dtype == DataType::Float).count(), 206);
    assert_eq!(inits.iter().filter(|t| t.dtype == DataType::Int8).count(), 90);

    let linears = linear_weights(&model).unwrap();
    assert_eq!(linears.len(), 45);
    assert_eq!(linears.iter().map(|l| l.uses).sum::<usize>(), 77);
    let quantized_matmuls = model.graph.nodes.iter().filter(|n| n.op_type == "MatMulInteger").count();
    assert_eq!(quantized_matmuls, 77);
    let init = model.initializer_map();
    for l in &linears {
        assert!(l.weight.ends_with("_quantized"), "{}", l.weight);
        assert!(l.logical.is_some(), "{} has no bias after it", l.weight);
        let zp = init[l.zero_point.as_deref().unwrap()].to_i64().unwrap();
        assert_eq!(zp, vec![0], "{}", l.weight);
        assert_eq!(init[l.scale.as_deref().unwrap()].numel(), 1);
    }
    let find = |logical: &str| linears.iter().find(|l| l.logical.as_deref() == Some(logical)).unwrap();
    assert_eq!(find("m.text.attn.self_attn.in_proj_weight").weight, "/Transpose_2_output_0_quantized");
    assert_eq!(find("m.text.attn.self_attn.in_proj_weight").uses, 4);
    assert_eq!(find("pn.text.attn.self_attn.in_proj_weight").weight, "/Transpose_25_output_0_quantized");
    assert_eq!(find("pn.text.attn.linear2.weight").uses, 6);
    assert_eq!(find("m.head.weight").weight, "/head/Transpose_output_0_quantized");
    assert_eq!(find("pn.text.convs.1.pw2.weight").weight, "/convs.1/pw2_1/Transpose_output_0_quantized");

    let params = parameters(&model).unwrap();
    assert_eq!(params.len(), 206);
    assert_eq!(params.values().map(|t| t.numel()).sum::<usize>(), 6_152_898);
    assert!(params.values().all(|t| t.dtype == DataType::Float));
    let dims = |name: &str| params[name].dims.clone();
    assert_eq!(dims("m.head.weight"), vec![3005, 256]);
    assert_eq!(dims("m.text.attn.self_attn.in_proj_weight"), vec![384, 128]);
    assert_eq!(dims("pn.text.attn.self_attn.in_proj_weight"), vec![576, 192]);
    assert_eq!(dims("m.dec.0.pw1.weight"), vec![768, 256]);
    assert_eq!(dims("m.text.emb.weight"), vec![178, 128]);

    // Dequantization is q * scale (zero points are 0): spot-check one element against the raw bytes.
    let head = find("m.head.weight");
    let q = init[head.weight.as_str()];
    let s = init[head.scale.as_deref().unwrap()].to_f32().unwrap()[0];
    let (rows_in, cols_out) = (q.dims[0], q.dims[1]);
    assert_eq!((rows_in, cols_out), (256, 3005));
    let (i, o) = (17, 2999);
    let expected = f32::from(q.data[i * cols_out + o] as i8) * s;
    let got = params["m.head.weight"].to_f32().unwrap()[o * rows_in + i];
    assert_eq!(got, expected);
}

/// The dequantized fp32 copy written by fixtures/make_fixtures.py (plain MatMul with float
/// initializers) must load to exactly the same parameters as the int8 file.
#[test]
fn fp32_copy_gives_the_same_parameters() {
    let Some(int8) = hibari_onnx() else { return };
    let fp32 = int8.parent().unwrap().join("../fixtures/hibari_fp32.onnx");
    if !fp32.is_file() {
        // Not made by scripts/setup-voice.sh (CI) but by the fixture tool, so this one stays optional.
        eprintln!("skipping: {} not found (run engine-libtorch/fixtures/make_fixtures.py)", fp32.display());
        return;
    }
    let a = parameters(&Model::load(&int8).unwrap()).unwrap();
    let fp32_model = Model::load(&fp32).unwrap();
    assert_eq!(fp32_model.graph.nodes.len(), 1423);
    assert_eq!(fp32_model.graph.initializers.len(), 206);
    let linears = linear_weights(&fp32_model).unwrap();
    assert_eq!((linears.len(), linears.iter().map(|l| l.uses).sum::<usize>()), (45, 77));
    let b = parameters(&fp32_model).unwrap();
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, t) in &a {
        assert_eq!(t.dims, b[name].dims, "{name}");
        assert!(t.data == b[name].data, "{name} differs");
    }
}
