//! Loading a voice (the ONNX file's parameters, the vocabulary) and choosing its precision.

use super::int8::cnx_int8;
use super::*;

impl Hibari {
    /// Loads `hibari.onnx` and `vocab.json` from a hibari assets directory (`.cache/hibari`).
    pub fn load(assets_dir: impl AsRef<Path>, device: Device) -> Result<Hibari, HibariError> {
        let dir = assets_dir.as_ref();
        let mut h = Hibari::from_onnx(dir.join("hibari.onnx"), device)?;
        let text = std::fs::read_to_string(dir.join("vocab.json"))?;
        h.vocab = parse_vocab(&text)?;
        Ok(h)
    }

    /// Loads another voice of the assets directory: `file` is a whole model file of hibari's graph
    /// (a voice *is* a model, see NOTES.md), with the directory's `vocab.json`.
    pub fn load_voice(assets_dir: impl AsRef<Path>, file: &str, device: Device) -> Result<Hibari, HibariError> {
        let dir = assets_dir.as_ref();
        let mut h = Hibari::from_onnx(dir.join(file), device)?;
        let text = std::fs::read_to_string(dir.join("vocab.json"))?;
        h.vocab = parse_vocab(&text)?;
        Ok(h)
    }

    /// Loads the weights of a hibari voice file (int8 as shipped, or a dequantized fp32 copy);
    /// no vocabulary (use [`Hibari::load`] for [`Hibari::ids`]).
    pub fn from_onnx(path: impl AsRef<Path>, device: Device) -> Result<Hibari, HibariError> {
        let model = Model::load(path)?;
        let raw = parameters(&model)?;
        let inits = model.initializer_map();
        let mut weight_scales = HashMap::new();
        for l in linear_weights(&model)? {
            if let (Some(name), Some(scale), Some(bias)) = (&l.logical, &l.scale, &l.bias) {
                let zero = match l.zero_point.as_deref().map(|z| inits[z].to_i64()) {
                    Some(z) => z?.iter().all(|&v| v == 0),
                    None => true,
                };
                let s = inits[scale.as_str()].to_f32()?;
                if zero && s.len() == 1 {
                    weight_scales.insert(name.clone(), (f64::from(s[0]), bias.clone()));
                }
            }
        }
        let mut params = HashMap::new();
        let mut count = 0;
        for (name, t) in raw {
            if t.dtype != crate::onnx::DataType::Float || t.data.len() != t.numel() * 4 {
                return Err(HibariError::Invalid(format!("{name} is not a float tensor of its shape")));
            }
            count += t.numel();
            let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
            // The file's little-endian floats (x86, ARM) copied as they are: one copy, no Vec<f32>.
            let tensor = if cfg!(target_endian = "little") {
                Tensor::from_data_size(&t.data, &dims, Kind::Float)
            } else {
                Tensor::from_slice(&t.to_f32()?).view(dims.as_slice())
            };
            params.insert(name, tensor.to_device(device));
        }
        if count != N_PARAMETERS {
            return Err(HibariError::Invalid(format!("{count} parameters, not hibari's {N_PARAMETERS}")));
        }
        let h = Hibari {
            device,
            precision: Precision::Fp32,
            params,
            int8: None,
            weight_scales,
            vocab: HashMap::new(),
            dsp: Dsp::new(device),
        };
        h.check_names()?;
        Ok(h)
    }

    /// The same network in another precision (loading gives [`Precision::Fp32`]). Int8 needs the
    /// CPU and a voice file with int8 weights (zero points 0); otherwise this is an error.
    pub fn set_precision(&mut self, precision: Precision) -> Result<(), HibariError> {
        let _g = tch::no_grad_guard();
        self.int8 = None;
        self.precision = Precision::Fp32;
        if precision == Precision::Fp32 {
            return Ok(());
        }
        if precision == Precision::Fp16 {
            return Err(HibariError::Invalid("hibari runs in int8 or fp32 (fp16 is Kokoro's)".into()));
        }
        if self.device != Device::Cpu {
            return Err(HibariError::Invalid(format!("int8 needs the CPU, not {:?}", self.device)));
        }
        if self.weight_scales.len() < 45 {
            return Err(HibariError::Invalid(format!("{} int8 Linear weights, not 45", self.weight_scales.len())));
        }
        self.int8 = Some(Int8::new(self, crate::cpu::level())?);
        self.precision = precision;
        Ok(())
    }

    /// [`Hibari::set_precision`] by value.
    pub fn with_precision(mut self, precision: Precision) -> Result<Hibari, HibariError> {
        self.set_precision(precision)?;
        Ok(self)
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Int8 with its matmuls on `level`'s kernels (or the best the CPU has below it) instead of
    /// [`crate::cpu::level`]'s: every level gives the same bits, which tests check with this.
    pub fn set_int8_kernels(&mut self, level: Level) -> Result<(), HibariError> {
        self.set_precision(Precision::Int8)?;
        self.int8 = Some(Int8::new(self, level)?);
        Ok(())
    }

    /// `--precision auto`: on the CPU, times one decoder block (the network's dominant cost:
    /// the decoder's 8 blocks are ~80% of its multiply-adds) on 128 frames in int8 and in fp32,
    /// best of 5 each, and keeps the faster; on CUDA, fp32 (int8 is CPU only). Which one wins
    /// depends on the CPU's instructions and on libtorch's build for it, so it is measured, not
    /// assumed (a few ms at start-up).
    pub fn set_fastest_precision(&mut self) -> Result<PrecisionChoice, HibariError> {
        let _g = tch::no_grad_guard();
        let level = crate::cpu::level();
        if self.device != Device::Cpu || self.weight_scales.len() < 45 {
            self.set_precision(Precision::Fp32)?;
            return Ok(PrecisionChoice { precision: Precision::Fp32, level, int8_s: None, fp32_s: None });
        }
        self.set_precision(Precision::Int8)?;
        let Some(int8) = self.int8.take() else { unreachable!("int8 weights were just built") };
        let x = Tensor::randn([128, 256], (Kind::Float, Device::Cpu));
        let fp32_x = x.transpose(0, 1).unsqueeze(0).contiguous();
        let time = |f: &dyn Fn()| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64()
        };
        let round = || {
            let f = time(&|| {
                let _ = self.cnx("m.dec.0", &fp32_x, 7, 1, None);
            });
            let i = time(&|| {
                let mut y = x.copy();
                // SAFETY: `y` is a new copy, held by no one else.
                unsafe { cnx_int8(int8.block("m.dec.0"), &mut y, &[128], 1, None) };
            });
            (i, f)
        };
        // The first round warms both up (allocator, libtorch's first-call set-up) and is not
        // counted. Then blocks of 5 interleaved rounds until two blocks in a row, each by its own
        // best times, name the same winner (at most 8 blocks); the choice is by the best times of
        // all blocks (the ones logged). A host that stalls for a few ms (seen on shared VMs: one
        // block at 5.2 ms int8 against 0.5-1 ms otherwise) cannot pick the slower precision alone.
        round();
        let (mut int8_s, mut fp32_s) = (f64::INFINITY, f64::INFINITY);
        let mut last = None;
        for _ in 0..8 {
            let (mut bi, mut bf) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..5 {
                let (i, f) = round();
                (bi, bf) = (bi.min(i), bf.min(f));
            }
            (int8_s, fp32_s) = (int8_s.min(bi), fp32_s.min(bf));
            let winner = bi <= bf;
            if last.replace(winner) == Some(winner) {
                break;
            }
        }
        (self.int8, self.precision) =
            if int8_s <= fp32_s { (Some(int8), Precision::Int8) } else { (None, Precision::Fp32) };
        let precision = self.precision;
        Ok(PrecisionChoice { precision, level, int8_s: Some(int8_s), fp32_s: Some(fp32_s) })
    }

    fn check_names(&self) -> Result<(), HibariError> {
        let mut need: Vec<String> =
            vec!["m.text.emb.weight".into(), "pn.text.emb.weight".into(), "m.head.weight".into()];
        need.extend(
            ["pn.dur.0.weight", "pn.dur.2.weight", "pn.pro_in.weight", "pn.pro_out.weight", "m.dec_in.weight"]
                .map(String::from),
        );
        for p in ["m.text.attn", "pn.text.attn"] {
            need.push(format!("{p}.self_attn.in_proj_weight"));
            need.push(format!("{p}.self_attn.out_proj.weight"));
            need.push(format!("{p}.linear1.weight"));
            need.push(format!("{p}.linear2.weight"));
        }
        for i in 0..8 {
            need.push(format!("m.dec.{i}.pw1.weight"));
            need.push(format!("m.dec.{i}.pw2.weight"));
        }
        for i in 0..6 {
            need.push(format!("pn.pro.{i}.pw2.weight"));
        }
        match need.iter().find(|n| !self.params.contains_key(n.as_str())) {
            Some(n) => Err(HibariError::Invalid(format!("parameter {n} missing"))),
            None => Ok(()),
        }
    }
}

fn parse_vocab(text: &str) -> Result<HashMap<char, i64>, HibariError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| HibariError::Json(e.to_string()))?;
    let obj = v.as_object().ok_or_else(|| HibariError::Json("not an object".into()))?;
    let mut out = HashMap::new();
    for (k, id) in obj {
        let mut cs = k.chars();
        let (Some(c), None) = (cs.next(), cs.next()) else {
            return Err(HibariError::Json(format!("key {k:?} is not one character")));
        };
        let id = id.as_i64().ok_or_else(|| HibariError::Json(format!("id of {k:?} is not an integer")))?;
        out.insert(c, id);
    }
    Ok(out)
}
