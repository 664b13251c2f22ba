//! The decode-attention kernel's shape (`ops::attention`'s decode kernel):
//! plain data, text and the split arithmetic, so that a device option
//! (`GpuOptions::decode`) can hold one; what an adapter can run and the
//! launch are the kernel's (`ops/attention/decode.rs`).

use std::fmt;
use std::str::FromStr;

/// How decode attention shapes its workgroups and splits its keys over
/// them: `ops::attention::record_attention_tuned` takes one,
/// `record_attention` the device's (`GpuOptions::decode`, else the
/// default: today's policy, chosen on an H100). A tuning is text too ([`FromStr`], the
/// syntax `bench attention --tunings` takes):
///
/// `WG[xTARGET | sSPLITS][mMERGE][hHEADS]` — `WG` invocations per
/// workgroup; then either `xTARGET`, splits aiming for `TARGET` workgroups
/// (the default policy with another target), or `sSPLITS`, exactly
/// `SPLITS` splits (fewer where the keys run out: `s1` is one split, no
/// combine launch); then optionally `mMERGE`, key groups merged per round
/// at the end (1: one at a time; more than the workgroup has: all at once);
/// then optionally `hHEADS`, query heads per workgroup where kv heads are
/// shared (grouped-query attention; [`DecodeTuning::heads`]). `256x132m4`
/// is the default; `1024s1m32` one workgroup of 1024 per kv head merged in
/// one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeTuning {
    /// Invocations per workgroup: a power of two, 32 to 1024, at most the
    /// adapter's `max_compute_invocations_per_workgroup` (256; 128 where
    /// the adapter allows no more, `ops::attention::device_tuning`).
    pub workgroup: u32,
    /// Workgroups the split aims for at least (132: one per compute unit
    /// of an H100/H200).
    pub target_groups: u64,
    /// Exactly this many splits instead of the policy (`None`: the policy);
    /// fewer where there are fewer 16-key steps.
    pub splits: Option<u64>,
    /// Fewest keys per split where there are more keys than that (32:
    /// below, each key group would take less than two steps).
    pub min_chunk: u64,
    /// Most keys per split (512: long caches get more workgroups rather
    /// than longer serial loops).
    pub max_chunk: u64,
    /// Key groups merged per round of the workgroup's final merge (1: one
    /// at a time, a barrier each; up to all of them in one round, which
    /// needs workgroup memory for all their outputs).
    pub merge: u32,
    /// Query heads a workgroup takes of the group sharing a kv head
    /// (`None`: one; more than the group: all of it;
    /// [`Self::heads_per_workgroup`]). All of them read each
    /// key once and can rotate the new keys in place (RoPE fused); fewer
    /// spread the group over more workgroups, each with fewer queries in
    /// registers, and RoPE takes a launch of its own.
    pub heads: Option<u32>,
}

impl Default for DecodeTuning {
    fn default() -> Self {
        Self {
            // 256 invocations for 132 workgroups: in session 19's sweep on
            // an H100 (BENCHMARKS.md, run S), 32 heads over 8 or 32 kv
            // heads, as fast as 128x264 at 256-1024 keys and 25-34 % faster
            // from 3 072 (512x32m8 is faster at 2 048 alone).
            workgroup: 256,
            target_groups: 132,
            splits: None,
            min_chunk: 32,
            max_chunk: 512,
            // Four key groups a round: on the H200 (run K, `bench attention`,
            // 32 heads, head_dim 128) faster than one in five of six cases
            // (GQA 8 kv heads at 2 048 keys 122 → 94 µs), slower at 512 keys
            // with 8 kv heads (35 → 41 µs).
            merge: 4,
            heads: None,
        }
    }
}

impl DecodeTuning {
    /// Query heads per workgroup for `group` heads per kv head: the
    /// tuning's `heads` (at most the group; one that does not divide it
    /// is the whole group), by default one.
    pub fn heads_per_workgroup(&self, group: u64) -> u64 {
        let group = group.max(1);
        match self.heads.map(|h| u64::from(h).clamp(1, group)) {
            Some(h) if group.is_multiple_of(h) => h,
            Some(_) => group,
            None => 1,
        }
    }

    /// Whether the kernel can rotate the new keys in place (RoPE fused):
    /// one workgroup takes all heads of a kv head.
    pub fn fuses_rope(&self, group: u64) -> bool {
        self.heads_per_workgroup(group) == group.max(1)
    }

    /// `(chunk, splits)` for `n_kv` kv heads over `keys` keys: `splits`
    /// where forced, else enough for `target_groups` workgroups, each at
    /// least `min_chunk` keys (where there are that many) and at most
    /// `max_chunk`; chunks are multiples of 16 keys (whole steps of four key
    /// groups of 4 keys), and no split is empty.
    pub fn split(&self, n_kv: u64, keys: u64) -> (u64, u64) {
        let keys = keys.max(1);
        let splits = match self.splits {
            Some(s) => s.max(1),
            None => {
                let lo = keys.div_ceil(self.max_chunk.max(1));
                let hi = keys.div_ceil(self.min_chunk.max(1)).max(lo);
                self.target_groups.div_ceil(n_kv.max(1)).clamp(lo, hi)
            }
        };
        let chunk = keys.div_ceil(splits).next_multiple_of(16);
        (chunk, keys.div_ceil(chunk))
    }
}

impl fmt::Display for DecodeTuning {
    /// The [`FromStr`] syntax (without the chunk bounds).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.workgroup)?;
        match self.splits {
            Some(s) => write!(f, "s{s}")?,
            None => write!(f, "x{}", self.target_groups)?,
        }
        if self.merge != 1 {
            write!(f, "m{}", self.merge)?;
        }
        if let Some(h) = self.heads {
            write!(f, "h{h}")?;
        }
        Ok(())
    }
}

impl FromStr for DecodeTuning {
    type Err = String;

    /// `WG[xTARGET | sSPLITS][mMERGE][hHEADS]`, see [`DecodeTuning`]; the
    /// chunk bounds are the default's.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "bad decode tuning `{text}`: {why} (want WG[xTARGET|sSPLITS][mMERGE][hHEADS], e.g. 128x264, 512s1, 1024s1m32, 128x264m4h1)"
            )
        };
        // The numbers, each after its one-letter tag (the first after none).
        let mut fields: Vec<(char, u64)> = Vec::new();
        let (mut tag, mut rest) = (' ', text.trim());
        loop {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (digits, tail) = rest.split_at(end);
            let n = digits.parse::<u64>().map_err(|_| {
                bad(if digits.is_empty() {
                    "a number is missing"
                } else {
                    "a number is out of range"
                })
            })?;
            fields.push((tag, n));
            let mut chars = tail.chars();
            match chars.next() {
                Some(c) => tag = c.to_ascii_lowercase(),
                None => break,
            }
            rest = chars.as_str();
        }
        let workgroup = match u32::try_from(fields[0].1) {
            Ok(wg) if wg.is_power_of_two() && (32..=1024).contains(&wg) => wg,
            _ => {
                return Err(bad("the workgroup size must be a power of two, 32 to 1024"));
            }
        };
        // No `m`: one key group a round.
        let mut t = Self {
            workgroup,
            merge: 1,
            ..Self::default()
        };
        // Tags in this order, each at most once; `x` or `s`, not both.
        let mut seen = 0;
        for &(tag, n) in &fields[1..] {
            let rank = match tag {
                'x' | 's' => 1,
                'm' => 2,
                'h' => 3,
                other => return Err(bad(&format!("unknown tag `{other}`"))),
            };
            if rank <= seen {
                return Err(bad(&format!("`{tag}` repeated or out of order")));
            }
            seen = rank;
            if n == 0 {
                return Err(bad(&format!("`{tag}` needs a number of at least 1")));
            }
            match tag {
                'x' => t.target_groups = n,
                's' => t.splits = Some(n),
                'm' => t.merge = u32::try_from(n).map_err(|_| bad("the merge is out of range"))?,
                _ => {
                    t.heads = Some(u32::try_from(n).map_err(|_| bad("the heads are out of range"))?)
                }
            }
        }
        Ok(t)
    }
}
