//! Choosing the next token from a row of logits on the CPU: greedy
//! (`argmax`, the default, reproducible) or sampling with a temperature,
//! top-k and top-p (nucleus) from a seeded generator, applied in the order
//! transformers' `generate(do_sample=True)` applies them: temperature, then
//! top-k, then top-p, then one draw from the renormalised probabilities.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::generate::argmax;

/// How to pick tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sampling {
    /// Divides the logits; 0 means greedy (argmax), the default.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the fewest most likely tokens whose probabilities sum to at
    /// least `top_p` (1: all).
    pub top_p: f32,
    /// Seed of the generator (the same seed, logits and settings give the
    /// same tokens).
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self::GREEDY
    }
}

impl Sampling {
    /// Argmax at every step.
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        seed: 0,
    };

    /// Whether this is greedy decoding.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks the ranges; the message names the flag and its value.
    pub fn check(&self) -> Result<(), String> {
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(format!(
                "--temperature {t}: expected a finite number of at least 0 (0 is greedy)"
            ));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(format!(
                "--top-p {p}: expected a number above 0 and at most 1"
            ));
        }
        if self.is_greedy() && (self.top_k != 0 || p != 1.0) {
            return Err(
                "--top-k and --top-p shape sampling, which needs --temperature above 0 \
                 (the default, 0, is greedy decoding)"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Picks tokens as a [`Sampling`] says (see the module docs).
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: Sampling,
    rng: ChaCha8Rng,
    /// Reused (index, logit or probability) buffer.
    scratch: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for `cfg` (checked).
    pub fn new(cfg: Sampling) -> Result<Self, String> {
        cfg.check()?;
        Ok(Self {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            scratch: Vec::new(),
        })
    }

    /// The settings.
    pub fn sampling(&self) -> Sampling {
        self.cfg
    }

    /// The next token from `logits` (one row). NaN logits are never chosen;
    /// a row with no finite logit falls back to argmax.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let c = self.cfg;
        if c.is_greedy() {
            return argmax(logits);
        }
        let v = &mut self.scratch;
        v.clear();
        v.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, x)| !x.is_nan() && **x != f32::NEG_INFINITY)
                .map(|(i, &x)| (i as u32, x)),
        );
        if v.is_empty() {
            return argmax(logits);
        }
        // Descending by logit, ties by the lower id first (deterministic).
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if c.top_k > 0 && c.top_k < v.len() {
            v.select_nth_unstable_by(c.top_k - 1, order);
            v.truncate(c.top_k);
        }
        v.sort_unstable_by(order);
        // Softmax of logit / temperature, shifted by the largest for range.
        let max = v[0].1;
        if max == f32::INFINITY {
            return v[0].0;
        }
        let mut total = 0.0f64;
        for e in v.iter_mut() {
            let p = (f64::from(e.1 - max) / f64::from(c.temperature)).exp();
            e.1 = p as f32;
            total += p;
        }
        // Nucleus: the shortest prefix reaching top_p of the mass (at least one).
        if c.top_p < 1.0 {
            let mut acc = 0.0f64;
            let mut keep = v.len();
            for (i, e) in v.iter().enumerate() {
                acc += f64::from(e.1) / total;
                if acc >= f64::from(c.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            v.truncate(keep);
            total = v.iter().map(|e| f64::from(e.1)).sum();
        }
        let mut r = self.rng.random::<f64>() * total;
        for e in v.iter() {
            r -= f64::from(e.1);
            if r < 0.0 {
                return e.0;
            }
        }
        v[v.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(Sampling {
            temperature,
            top_k,
            top_p,
            seed,
        })
        .expect("valid")
    }

    fn counts(s: &mut Sampler, logits: &[f32], n: usize) -> Vec<usize> {
        let mut c = vec![0; logits.len()];
        for _ in 0..n {
            c[s.pick(logits) as usize] += 1;
        }
        c
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(Sampling::GREEDY).expect("greedy");
        assert_eq!(s.pick(&[0.1, 3.0, f32::NAN, 2.0]), 1);
    }

    #[test]
    fn same_seed_same_tokens_other_seed_other_tokens() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = sampler(1.0, 0, 1.0, seed);
            (0..64).map(|_| s.pick(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_k_keeps_only_the_k_largest() {
        let logits = [0.0, 5.0, 1.0, 4.9, 4.8, -1.0];
        let c = counts(&mut sampler(10.0, 3, 1.0, 1), &logits, 3000);
        assert_eq!(c[0] + c[2] + c[5], 0, "{c:?}");
        assert!(c[1] > 0 && c[3] > 0 && c[4] > 0, "{c:?}");
    }

    #[test]
    fn top_p_keeps_the_smallest_nucleus() {
        // Probabilities at T=1: ~0.665, 0.245, 0.090 (and ~0 for the rest).
        let logits = [2.0, 1.0, 0.0, -20.0];
        let c = counts(&mut sampler(1.0, 0, 0.8, 3), &logits, 4000);
        assert_eq!(c[2] + c[3], 0, "0.665 + 0.245 reaches 0.8: {c:?}");
        let share = c[0] as f64 / 4000.0;
        // Renormalised: 0.665 / 0.910 = 0.731.
        assert!((share - 0.731).abs() < 0.03, "{share}");
        let c = counts(&mut sampler(1.0, 0, 0.5, 3), &logits, 100);
        assert_eq!(c[0], 100, "the top token alone holds 0.5");
    }

    #[test]
    fn temperature_sharpens_and_flattens() {
        let logits = [1.0, 0.0];
        let cold = counts(&mut sampler(0.1, 0, 1.0, 5), &logits, 2000)[0];
        let hot = counts(&mut sampler(100.0, 0, 1.0, 5), &logits, 2000)[0];
        assert!(cold > 1990, "{cold}");
        assert!((900..1100).contains(&hot), "{hot}");
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let bad = |t, k, p| {
            Sampling {
                temperature: t,
                top_k: k,
                top_p: p,
                seed: 0,
            }
            .check()
            .expect_err("bad")
        };
        assert!(bad(-1.0, 0, 1.0).contains("--temperature -1"));
        assert!(bad(f32::NAN, 0, 1.0).contains("--temperature NaN"));
        assert!(bad(1.0, 0, 0.0).contains("--top-p 0"));
        assert!(bad(1.0, 0, 1.5).contains("--top-p 1.5"));
        assert!(bad(0.0, 5, 1.0).contains("--temperature above 0"));
    }
}
