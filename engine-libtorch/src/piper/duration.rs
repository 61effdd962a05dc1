//! VITS's duration predictors, run in reverse (inference): the stochastic one ([`Stochastic`],
//! Piper's default: noise through a stack of neural spline flows conditioned on the text
//! encoding) and the plain one ([`Plain`]: convolutions to log durations), behind
//! [`Durations`]. Both return log w [1, 1, L]. Batch 1, every position valid: VITS's masks are
//! all ones here and left out.

use tch::{Kind, Tensor};

use super::load::{Conv, Weights};

type R<T> = Result<T, String>;

/// Layer norm over the channels of [1, C, T] (VITS's `modules.LayerNorm`, ε 1e-5).
pub(super) struct ChannelNorm {
    gamma: Tensor,
    beta: Tensor,
}

impl ChannelNorm {
    pub fn load(w: &Weights, module: &str) -> R<ChannelNorm> {
        Ok(ChannelNorm { gamma: w.float(&format!("{module}.gamma"))?, beta: w.float(&format!("{module}.beta"))? })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let c = x.size()[1];
        x.transpose(1, 2).layer_norm([c], Some(&self.gamma), Some(&self.beta), 1e-5, false).transpose(1, 2)
    }
}

/// Dilated depth-separable convolutions (`modules.DDSConv`): per layer a depthwise conv
/// (dilation kᶦ), norm, GELU, 1×1 conv, norm, GELU, added to the input.
struct DdsConv {
    layers: Vec<(Conv, ChannelNorm, Conv, ChannelNorm)>,
}

impl DdsConv {
    fn load(w: &Weights, module: &str) -> R<DdsConv> {
        let mut layers = Vec::new();
        for i in 0.. {
            if !w.has(&format!("{module}.convs_sep.{i}.weight")) {
                break;
            }
            layers.push((
                w.conv(&format!("{module}.convs_sep.{i}"))?,
                ChannelNorm::load(w, &format!("{module}.norms_1.{i}"))?,
                w.conv(&format!("{module}.convs_1x1.{i}"))?,
                ChannelNorm::load(w, &format!("{module}.norms_2.{i}"))?,
            ));
        }
        if layers.is_empty() {
            return Err(format!("{module}: no layers"));
        }
        Ok(DdsConv { layers })
    }

    fn forward(&self, x: &Tensor, g: Option<&Tensor>) -> Tensor {
        let mut x = match g {
            Some(g) => x + g,
            None => x.shallow_clone(),
        };
        for (sep, n1, one, n2) in &self.layers {
            let y = n1.forward(&sep.forward(&x)).gelu("none");
            let y = n2.forward(&one.forward(&y)).gelu("none");
            x = &x + y;
        }
        x
    }
}

/// The spline flows' fixed shape (`modules.ConvFlow`'s defaults, which Piper keeps).
const TAIL_BOUND: f64 = 5.0;
const MIN_BIN: f64 = 1e-3;
const MIN_DERIVATIVE: f64 = 1e-3;

/// A neural spline flow (`modules.ConvFlow`): the first channel conditions a monotonic
/// rational-quadratic spline of the second, linear outside ±[`TAIL_BOUND`].
struct ConvFlow {
    pre: Conv,
    convs: DdsConv,
    proj: Conv,
    bins: i64,
    /// √filter channels, the widths' and heights' divisor
    scale: f64,
}

impl ConvFlow {
    fn load(w: &Weights, module: &str) -> R<ConvFlow> {
        let pre = w.conv(&format!("{module}.pre"))?;
        let proj = w.conv(&format!("{module}.proj"))?;
        if pre.c_in() != 1 || (proj.c_out() + 1) % 3 != 0 {
            return Err(format!("{module}: a flow of 2 channels with 3·bins − 1 spline parameters"));
        }
        Ok(ConvFlow {
            scale: (pre.c_out() as f64).sqrt(),
            bins: (proj.c_out() + 1) / 3,
            pre,
            convs: DdsConv::load(w, &format!("{module}.convs"))?,
            proj,
        })
    }

    /// The inverse: z [1, 2, L] → [1, 2, L], conditioned on `g` [1, F, L].
    fn reverse(&self, z: &Tensor, g: &Tensor) -> Tensor {
        let x0 = z.narrow(1, 0, 1);
        let x1 = z.narrow(1, 1, 1);
        let h = self.proj.forward(&self.convs.forward(&self.pre.forward(&x0), Some(g)));
        // [1, 3·bins − 1, L] → [L, 3·bins − 1]
        let h = h.squeeze_dim(0).transpose(0, 1);
        let nb = self.bins;
        let uw = h.narrow(1, 0, nb) / self.scale;
        let uh = h.narrow(1, nb, nb) / self.scale;
        let ud = h.narrow(1, 2 * nb, nb - 1);
        let y = spline_inverse(&x1.view([-1]), &uw, &uh, &ud);
        Tensor::cat(&[x0, y.view([1, 1, -1])], 1)
    }
}

/// The inverse of the rational-quadratic spline (Durkan et al. 2019) with linear tails, as
/// VITS's `transforms.unconstrained_rational_quadratic_spline(inverse=True)` computes it, the
/// same operations in the same order: x [N], the unnormalised widths and heights [N, bins] and
/// inner derivatives [N, bins − 1].
fn spline_inverse(x: &Tensor, uw: &Tensor, uh: &Tensor, ud: &Tensor) -> Tensor {
    let (n, nb) = (uw.size()[0], uw.size()[1]);
    let dev = x.device();
    let (left, right) = (-TAIL_BOUND, TAIL_BOUND);
    let inside = x.ge(left).logical_and(&x.le(right));
    // the tails' derivative is 1: softplus(c) = 1 − min_derivative
    let c = ((1.0 - MIN_DERIVATIVE).exp() - 1.0).ln();
    let edge = Tensor::full([n, 1], c, (Kind::Float, dev));
    let ud = Tensor::cat(&[&edge, ud, &edge], 1);
    // bin edges: softmax, floored at MIN_BIN, summed, spread over [left, right], ends exact
    let knots = |u: &Tensor| -> (Tensor, Tensor) {
        let s = u.softmax(-1, Kind::Float) * (1.0 - MIN_BIN * nb as f64) + MIN_BIN;
        let cum = s.cumsum(-1, Kind::Float);
        let cum = Tensor::cat(&[Tensor::zeros([n, 1], (Kind::Float, dev)), cum], 1) * (right - left) + left;
        let cum = Tensor::cat(
            &[
                Tensor::full([n, 1], left, (Kind::Float, dev)),
                cum.narrow(1, 1, nb - 1),
                Tensor::full([n, 1], right, (Kind::Float, dev)),
            ],
            1,
        );
        let widths = cum.narrow(1, 1, nb) - cum.narrow(1, 0, nb);
        (cum, widths)
    };
    let (cumw, widths) = knots(uw);
    let (cumh, heights) = knots(uh);
    let derivs = ud.softplus() + MIN_DERIVATIVE;
    // the bin of each x among the heights' knots (the last one nudged up by 1e-6, as VITS does)
    let nudge =
        Tensor::cat(&[Tensor::zeros([n, nb], (Kind::Float, dev)), Tensor::full([n, 1], 1e-6, (Kind::Float, dev))], 1);
    let located = &cumh + nudge;
    let idx = x.unsqueeze(1).ge_tensor(&located).sum_dim_intlist(-1, true, Kind::Int64) - 1;
    // outside the interval the result is x itself; keep the gathers within the bins there
    let idx = idx.clamp(0, nb - 1);
    let at = |t: &Tensor| t.gather(1, &idx, false).squeeze_dim(1);
    let in_cumw = at(&cumw);
    let in_w = at(&widths);
    let in_cumh = at(&cumh);
    let delta = &heights / &widths;
    let in_delta = at(&delta);
    let in_d = at(&derivs);
    let in_d1 = at(&derivs.narrow(1, 1, nb));
    let in_h = at(&heights);
    let dx = x - &in_cumh;
    let slope = &in_d + &in_d1 - &in_delta * 2.0;
    let a = &dx * &slope + &in_h * (&in_delta - &in_d);
    let b = &in_h * &in_d - &dx * &slope;
    let c = -&in_delta * &dx;
    let disc = b.pow_tensor_scalar(2) - &a * &c * 4.0;
    let root = (&c * 2.0) / (-&b - disc.sqrt());
    let out = root * in_w + in_cumw;
    out.where_self(&inside, x)
}

/// The stochastic duration predictor (`StochasticDurationPredictor`) in reverse.
pub(super) struct Stochastic {
    pre: Conv,
    convs: DdsConv,
    proj: Conv,
    cond: Option<Conv>,
    /// the flows in the order the reverse pass runs them (the last one, unused, left out)
    flows: Vec<ConvFlow>,
    /// ElementwiseAffine: m and exp(−logs), [2, 1]
    m: Tensor,
    inv_scale: Tensor,
}

impl Stochastic {
    fn load(w: &Weights) -> R<Stochastic> {
        // flows.0 is the ElementwiseAffine; flows.1, 3, 5... spline flows (each followed by a
        // Flip); the reverse pass skips flows.1, and the export has no weights for it
        let mut flows = Vec::new();
        for i in (3..).step_by(2) {
            if !w.has(&format!("dp.flows.{i}.pre.weight")) && !w.has(&format!("dp.flows.{i}.pre.bias")) {
                break;
            }
            flows.push(ConvFlow::load(w, &format!("dp.flows.{i}"))?);
        }
        if flows.is_empty() {
            return Err("dp: no spline flows".into());
        }
        flows.reverse();
        let inv_scale = if w.has("dp.flows.0.logs") {
            w.float("dp.flows.0.logs")?.neg().exp()
        } else {
            w.factor_after_sub("dp.flows.0.m")?
        };
        Ok(Stochastic {
            pre: w.conv("dp.pre")?,
            convs: DdsConv::load(w, "dp.convs")?,
            proj: w.conv("dp.proj")?,
            cond: if w.has("dp.cond.weight") || w.has("dp.cond.bias") { Some(w.conv("dp.cond")?) } else { None },
            flows,
            m: w.float("dp.flows.0.m")?.view([1, 2, 1]),
            inv_scale: inv_scale.view([1, 2, 1]),
        })
    }

    /// x [1, H, L], g [1, gin, 1], noise [1, 2, L] (standard normal) → log w [1, 1, L].
    fn forward(&self, x: &Tensor, g: Option<&Tensor>, noise: &Tensor, noise_w: f64) -> Tensor {
        let mut x = self.pre.forward(x);
        if let (Some(cond), Some(g)) = (&self.cond, g) {
            x = &x + cond.forward(g);
        }
        let x = self.proj.forward(&self.convs.forward(&x, None));
        let mut z = noise * noise_w;
        for flow in &self.flows {
            z = flow.reverse(&z.flip([1]), &x);
        }
        let z = z.flip([1]);
        let z = (z - &self.m) * &self.inv_scale;
        z.narrow(1, 0, 1)
    }
}

/// The plain duration predictor (`DurationPredictor`): two conv + ReLU + norm layers and a
/// projection to log w.
pub(super) struct Plain {
    conv1: Conv,
    norm1: ChannelNorm,
    conv2: Conv,
    norm2: ChannelNorm,
    proj: Conv,
    cond: Option<Conv>,
}

impl Plain {
    fn load(w: &Weights) -> R<Plain> {
        Ok(Plain {
            conv1: w.conv("dp.conv_1")?,
            norm1: ChannelNorm::load(w, "dp.norm_1")?,
            conv2: w.conv("dp.conv_2")?,
            norm2: ChannelNorm::load(w, "dp.norm_2")?,
            proj: w.conv("dp.proj")?,
            cond: if w.has("dp.cond.weight") || w.has("dp.cond.bias") { Some(w.conv("dp.cond")?) } else { None },
        })
    }

    fn forward(&self, x: &Tensor, g: Option<&Tensor>) -> Tensor {
        let x = match (&self.cond, g) {
            (Some(cond), Some(g)) => x + cond.forward(g),
            _ => x.shallow_clone(),
        };
        let x = self.norm1.forward(&self.conv1.forward(&x).relu());
        let x = self.norm2.forward(&self.conv2.forward(&x).relu());
        self.proj.forward(&x)
    }
}

/// The voice's duration predictor.
pub(super) enum Durations {
    Stochastic(Box<Stochastic>),
    Plain(Box<Plain>),
}

impl Durations {
    /// The stochastic predictor where the export has its flows (`dp.flows.0.m`), else the plain.
    pub fn load(w: &Weights) -> R<Durations> {
        if w.has("dp.flows.0.m") {
            Ok(Durations::Stochastic(Box::new(Stochastic::load(w)?)))
        } else if w.has("dp.conv_1.weight") || w.has("dp.conv_1.bias") {
            Ok(Durations::Plain(Box::new(Plain::load(w)?)))
        } else {
            Err("no duration predictor (dp.flows.0.m or dp.conv_1)".into())
        }
    }

    pub fn stochastic(&self) -> bool {
        matches!(self, Durations::Stochastic(_))
    }

    /// log w [1, 1, L] of the text encoding x [1, H, L]; `noise` [1, 2, L] feeds the stochastic
    /// predictor (times `noise_w`), the plain one has none.
    pub fn forward(&self, x: &Tensor, g: Option<&Tensor>, noise: &Tensor, noise_w: f64) -> Tensor {
        match self {
            Durations::Stochastic(s) => s.forward(x, g, noise, noise_w),
            Durations::Plain(p) => p.forward(x, g),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spline's inverse maps [−5, 5] into itself, monotonically, and is the identity
    /// outside (its values are checked against onnxruntime's by tests/piper_model.rs).
    #[test]
    fn spline_inverse_is_monotonic_inside_and_identity_outside() {
        let n = 64i64;
        let nb = 10i64;
        let p = |seed: f64, len: i64| {
            let v: Vec<f32> = (0..len).map(|i| ((i as f64 * 0.731 + seed).sin() * 1.7) as f32).collect();
            Tensor::from_slice(&v)
        };
        let uw = p(0.1, n * nb).view([n, nb]);
        let uh = p(0.7, n * nb).view([n, nb]);
        let ud = p(1.3, n * (nb - 1)).view([n, nb - 1]);
        let xs: Vec<f32> = (0..n).map(|i| -6.0 + 12.0 * i as f32 / (n - 1) as f32).collect();
        let y = spline_inverse(&Tensor::from_slice(&xs), &uw, &uh, &ud);
        let y = Vec::<f32>::try_from(y).expect("floats");
        for (i, (&x, &y)) in xs.iter().zip(&y).enumerate() {
            if x.abs() > 5.0 {
                assert_eq!(x, y, "identity outside the tails");
                continue;
            }
            assert!((-5.0..=5.0).contains(&y), "{i}: {y}");
            // monotonic: the inverse of a slightly larger x (same parameters) is larger
            let x2 = Tensor::from_slice(&[x, (x + 1e-3).min(5.0)]);
            let row = |t: &Tensor| t.narrow(0, i as i64, 1).repeat([2, 1]);
            let y2 = Vec::<f32>::try_from(spline_inverse(&x2, &row(&uw), &row(&uh), &row(&ud))).expect("floats");
            assert!(y2[1] >= y2[0], "{i}: not monotonic");
        }
    }
}
