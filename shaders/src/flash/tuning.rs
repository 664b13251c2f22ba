//! A flash-attention kernel and its tuning as values: [`FlashTuning`],
//! [`KvStaging`], [`FlashKernel`], and their text form.

use std::fmt;
use std::str::FromStr;

/// How a block's keys and values reach the matrix loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvStaging {
    /// One workgroup-memory buffer: the keys, then the values over them
    /// once the scores are out (four barriers a block; the least memory).
    Serial,
    /// Keys and values in buffers of their own, both staged before the
    /// scores (three barriers a block).
    Paired,
    /// No staging: the matrices load straight from k and v (two barriers a
    /// block; a block's partial last tile of keys goes through workgroup
    /// memory, zero past the last key). Needs one key group.
    Global,
    /// Keys and values paired, in two stages: the next block's, read into
    /// registers at the top of a block (`r`, which it needs), are stored
    /// into the other stage once this block's scores are out, so they are
    /// never waited for (two barriers a block; twice the memory of
    /// [`Self::Paired`]).
    Double,
}

/// A flash-attention workgroup's shape (see `flash_attention.wgsl`).
///
/// Text form ([`FromStr`], [`fmt::Display`]):
/// `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]` — `BR` query rows per workgroup and
/// `BC` keys per block (multiples of the matrix edge, `BR` a power of two);
/// `wNSG` subgroups (a power of two, default 4); `kKG` key groups: the
/// subgroups sharing a row block's scores split its keys (default 1);
/// `cCG` column groups: the subgroups sharing an output row block split its
/// head columns (default 1); the staging of keys and values, `s` serial
/// (default), `p` paired, `g` global or `d` double ([`KvStaging`]); `r`:
/// the next block's keys and values read into registers while this block
/// computes (serial, paired, and double, which needs it); `t`: scores and probabilities column-major in
/// workgroup memory (default row-major); `m`: the queries' matrices
/// materialized in registers as loaded. E.g. `64x64w4c2`, `128x32w8c2pr`,
/// `64x64w4gt`, `128x16w8c2dr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlashTuning {
    /// Query rows per workgroup (`BR`).
    pub rows: u32,
    /// Keys per block (`BC`).
    pub keys: u32,
    /// Subgroups per workgroup (`NSG`).
    pub subgroups: u32,
    /// Subgroups that split one row block's keys in the scores product.
    pub key_groups: u32,
    /// Subgroups that split one output row block's head columns.
    pub col_groups: u32,
    /// How keys and values are staged.
    pub staging: KvStaging,
    /// The next block's keys and values read into registers during this
    /// block (serial and paired staging).
    pub prefetch: bool,
    /// Scores and probabilities column-major in workgroup memory (the
    /// softmax's consecutive lanes on consecutive rows: no bank conflicts)
    /// instead of row-major (the layout the two-walk kernel ran on NVIDIA).
    pub column_major: bool,
    /// The queries' matrices held in variables, each multiplied by a
    /// runtime 1 as loaded: forces them into registers at the load (a
    /// compiler that re-reads a loaded matrix from workgroup memory where
    /// it is used would read keys or probabilities by then).
    pub materialize: bool,
}

impl FlashTuning {
    /// The shape `flash_attention.wgsl`'s generated region is written for
    /// (16 × 16 matrices, subgroups of 32, head_dim 128).
    pub const FILE: Self = Self {
        rows: 64,
        keys: 64,
        subgroups: 4,
        key_groups: 1,
        col_groups: 2,
        staging: KvStaging::Serial,
        prefetch: false,
        column_major: false,
        materialize: false,
    };
}

impl fmt::Display for KvStaging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Serial => "serial",
            Self::Paired => "paired",
            Self::Global => "global",
            Self::Double => "double",
        })
    }
}

impl fmt::Display for FlashTuning {
    /// The [`FromStr`] syntax, defaults left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}w{}", self.rows, self.keys, self.subgroups)?;
        if self.key_groups != 1 {
            write!(f, "k{}", self.key_groups)?;
        }
        if self.col_groups != 1 {
            write!(f, "c{}", self.col_groups)?;
        }
        match self.staging {
            KvStaging::Serial => {}
            KvStaging::Paired => f.write_str("p")?,
            KvStaging::Global => f.write_str("g")?,
            KvStaging::Double => f.write_str("d")?,
        }
        if self.prefetch {
            f.write_str("r")?;
        }
        if self.column_major {
            f.write_str("t")?;
        }
        if self.materialize {
            f.write_str("m")?;
        }
        Ok(())
    }
}

impl FromStr for FlashTuning {
    type Err = String;

    /// `BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m]`, see [`FlashTuning`]; the shape's
    /// own limits are checked by [`FlashTuning::geometry`].
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "bad flash tuning `{text}`: {why} (want BRxBC[wNSG][kKG][cCG][s|p|g|d][r][t][m], e.g. 64x64w4c2, 128x32w8c2pr)"
            )
        };
        let mut rest = text.trim();
        let number = |rest: &mut &str| -> Result<u32, String> {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (digits, tail) = rest.split_at(end);
            *rest = tail;
            match digits.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                Ok(_) => Err(bad("a number is 0")),
                Err(_) if digits.is_empty() => Err(bad("a number is missing")),
                Err(_) => Err(bad("a number is out of range")),
            }
        };
        let rows = number(&mut rest)?;
        rest = rest
            .strip_prefix(['x', 'X'])
            .ok_or_else(|| bad("`x` must follow the rows"))?;
        let keys = number(&mut rest)?;
        let mut t = Self {
            rows,
            keys,
            subgroups: 4,
            key_groups: 1,
            col_groups: 1,
            staging: KvStaging::Serial,
            prefetch: false,
            column_major: false,
            materialize: false,
        };
        // Tags in this order, each at most once.
        let mut seen = 0;
        while let Some(c) = rest.chars().next() {
            let rank = match c {
                'w' => 1,
                'k' => 2,
                'c' => 3,
                's' | 'p' | 'g' | 'd' => 4,
                'r' => 5,
                't' => 6,
                'm' => 7,
                other => return Err(bad(&format!("unknown tag `{other}`"))),
            };
            if rank <= seen {
                return Err(bad(&format!("`{c}` repeated or out of order")));
            }
            seen = rank;
            rest = &rest[1..];
            match c {
                'w' => t.subgroups = number(&mut rest)?,
                'k' => t.key_groups = number(&mut rest)?,
                'c' => t.col_groups = number(&mut rest)?,
                's' => t.staging = KvStaging::Serial,
                'p' => t.staging = KvStaging::Paired,
                'g' => t.staging = KvStaging::Global,
                'd' => t.staging = KvStaging::Double,
                'r' => t.prefetch = true,
                't' => t.column_major = true,
                _ => t.materialize = true,
            }
        }
        Ok(t)
    }
}

/// Which flash-attention kernel a launch runs: the two-walk kernel
/// (`flash_attention_two_walk.wgsl`, its shape chosen per adapter), the
/// one-walk kernel with a [`FlashTuning`], or a SPIR-V kernel on NVIDIA's
/// cooperative matrices 2 (`crate::spirv::CM2_FLASH`, by block shape).
///
/// Text form: `two-walk`, a [`FlashTuning`]'s, or `cm2-ROWSxKEYS` with `f`
/// or `fN` after it for the fast inner loop (`N` blocks an iteration) and
/// `-sg` or `-sgN` after that for the subgroup-scope kernels
/// ([`Cm2Block::subgroup`]), `-db` after that for their two buffers
/// ([`Cm2Block::double_buffer`]), `-lz` after that for their lazy rescale
/// ([`Cm2Block::lazy`]), `-qs` after that for Q in shared memory
/// ([`Cm2Block::q_shared`]), and `-probeN` after that for a probe
/// ([`Cm2Block::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlashKernel {
    /// Two walks over the keys: the softmax statistics, then the outputs
    /// (a third more products, no output rescaling).
    TwoWalk,
    /// One walk with an online softmax, shaped by the tuning.
    OneWalk(FlashTuning),
    /// The SPIR-V kernel of this block (for the head dimension at hand).
    Cm2(Cm2Block),
}

/// A SPIR-V flash kernel's block (`crate::spirv::Cm2Flash::block`): `rows`
/// query rows by `keys` keys, and its inner loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cm2Block {
    /// Query rows a workgroup.
    pub rows: u32,
    /// Keys a block.
    pub keys: u32,
    /// 0: every block's loads clamped; n > 0: blocks inside the keys
    /// unclamped, n an iteration (`FA_FAST`).
    pub fast: u32,
    /// 0: attention. n > 0: a probe that is not attention, timing part of
    /// the kernel's work (`FA_PROBE` in `flash_cm2.glsl`: 1 the two
    /// products alone, 2 the softmax without the output's rescale); run
    /// only by name, by `bench attention`.
    pub probe: u32,
    /// 0: workgroup-scope matrices. n > 0: subgroup-scope ones, n row
    /// fragments of 16 query rows a subgroup, K and V staged by the kernel
    /// (`flash_cm2_sg.glsl`'s `RW`).
    pub subgroup: u32,
    /// Subgroup-scope kernels: K and V in two shared buffers, one barrier a
    /// block (`flash_cm2_sg.glsl`'s `DB`), rather than one.
    pub double_buffer: bool,
    /// Subgroup-scope kernels: the output's rescale skipped where no row
    /// maximum rose, the row sums reduced once at the end
    /// (`flash_cm2_sg.glsl`'s `LAZY`).
    pub lazy: bool,
    /// Subgroup-scope kernels: the workgroup's Q rows in shared memory,
    /// loaded for each block's products rather than held in registers
    /// (`flash_cm2_sg.glsl`'s `QSH`).
    pub q_shared: bool,
}

impl fmt::Display for FlashKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TwoWalk => f.write_str("two-walk"),
            Self::OneWalk(t) => t.fmt(f),
            Self::Cm2(Cm2Block {
                rows,
                keys,
                fast,
                probe,
                subgroup,
                double_buffer,
                lazy,
                q_shared,
            }) => {
                write!(f, "cm2-{rows}x{keys}")?;
                match fast {
                    0 => {}
                    1 => f.write_str("f")?,
                    n => write!(f, "f{n}")?,
                }
                match subgroup {
                    0 => {}
                    1 => f.write_str("-sg")?,
                    n => write!(f, "-sg{n}")?,
                }
                if *double_buffer {
                    f.write_str("-db")?;
                }
                if *lazy {
                    f.write_str("-lz")?;
                }
                if *q_shared {
                    f.write_str("-qs")?;
                }
                match probe {
                    0 => Ok(()),
                    n => write!(f, "-probe{n}"),
                }
            }
        }
    }
}

impl FromStr for FlashKernel {
    type Err = String;

    /// `two-walk`, a [`FlashTuning`] or `cm2-ROWSxKEYS`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "two-walk" => Ok(Self::TwoWalk),
            t => match t.strip_prefix("cm2-") {
                Some(shape) => {
                    let bad = || {
                        format!(
                            "flash kernel `{t}`: want cm2-ROWSxKEYS[f[N]][-sg[N][-db][-lz][-qs]]"
                        )
                    };
                    let (shape, probe) = match shape.split_once("-probe") {
                        None => (shape, 0),
                        Some((shape, n)) => {
                            (shape, n.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?)
                        }
                    };
                    // A subgroup-scope kernel's flag: `suffix` at the end,
                    // allowed only after `-sg` (`None` where it comes
                    // without).
                    fn flag<'s>(shape: &'s str, suffix: &str) -> Option<(&'s str, bool)> {
                        match shape.strip_suffix(suffix) {
                            Some(shape) => shape.contains("-sg").then_some((shape, true)),
                            None => Some((shape, false)),
                        }
                    }
                    let (shape, q_shared) = flag(shape, "-qs").ok_or_else(bad)?;
                    let (shape, lazy) = flag(shape, "-lz").ok_or_else(bad)?;
                    let (shape, double_buffer) = flag(shape, "-db").ok_or_else(bad)?;
                    let (shape, subgroup) = match shape.split_once("-sg") {
                        None => (shape, 0),
                        Some((shape, "")) => (shape, 1),
                        Some((shape, n)) => {
                            (shape, n.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?)
                        }
                    };
                    let (rows, keys) = shape.split_once('x').ok_or_else(bad)?;
                    let (keys, fast) = match keys.split_once('f') {
                        None => (keys, 0),
                        Some((keys, "")) => (keys, 1),
                        Some((keys, n)) => {
                            (keys, n.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?)
                        }
                    };
                    Ok(Self::Cm2(Cm2Block {
                        rows: rows.parse().map_err(|_| bad())?,
                        keys: keys.parse().map_err(|_| bad())?,
                        fast,
                        probe,
                        subgroup,
                        double_buffer,
                        lazy,
                        q_shared,
                    }))
                }
                None => t.parse().map(Self::OneWalk),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cm2Block, FlashKernel};

    #[test]
    fn kernels_read_back_what_they_write() {
        for text in [
            "two-walk",
            "128x32w8c2",
            "cm2-128x64",
            "cm2-64x32",
            "cm2-128x32f",
            "cm2-128x32f2",
            "cm2-64x32f-probe1",
            "cm2-128x64-sg",
            "cm2-128x32-sg2",
            "cm2-128x32-sg2-db",
            "cm2-128x16-sg2-lz-qs",
        ] {
            let k: FlashKernel = text.parse().expect(text);
            assert_eq!(k.to_string(), text);
        }
        assert_eq!(
            "cm2-128x64".parse::<FlashKernel>(),
            Ok(FlashKernel::Cm2(Cm2Block {
                rows: 128,
                keys: 64,
                fast: 0,
                probe: 0,
                subgroup: 0,
                double_buffer: false,
                lazy: false,
                q_shared: false,
            }))
        );
        assert_eq!(
            "cm2-128x32f2".parse::<FlashKernel>(),
            Ok(FlashKernel::Cm2(Cm2Block {
                rows: 128,
                keys: 32,
                fast: 2,
                probe: 0,
                subgroup: 0,
                double_buffer: false,
                lazy: false,
                q_shared: false,
            }))
        );
        assert_eq!(
            "cm2-64x32f-probe2".parse::<FlashKernel>(),
            Ok(FlashKernel::Cm2(Cm2Block {
                rows: 64,
                keys: 32,
                fast: 1,
                probe: 2,
                subgroup: 0,
                double_buffer: false,
                lazy: false,
                q_shared: false,
            }))
        );
        for bad in [
            "cm2-128",
            "cm2-x64",
            "cm2-128xq",
            "cm2-128x32f0",
            "cm2-128x32fx",
            "cm2-64x32f-probe0",
            "cm2-64x32f-probe",
            "cm2-128x64-sgx",
            "cm2-128x64-db",
            "cm2-128x64-qs",
        ] {
            let why = bad.parse::<FlashKernel>().expect_err(bad);
            assert!(why.contains("cm2-ROWSxKEYS"), "{bad}: {why}");
        }
    }
}
