//! Checking a checkpoint's tensors against its config before a pass: each
//! error names the file, the tensor and both shapes.

use std::path::Path;

use dynvram_runtime::quant::{self, Format, TensorList};

use crate::error::ModelError;

/// The tail of every checkpoint's `open`: the config given (validated by
/// `validate`, its complaint named `config: …`) or inferred from the
/// shapes, then checked against every tensor a pass uses; with whether it
/// was inferred.
pub(crate) fn settle_config<C>(
    given: Option<C>,
    validate: impl FnOnce(&C) -> Result<(), String>,
    err: impl Fn(String) -> ModelError,
    infer: impl FnOnce() -> Result<C, ModelError>,
    check: impl FnOnce(&C) -> Result<(), ModelError>,
) -> Result<(C, bool), ModelError> {
    let (config, inferred) = match given {
        Some(c) => {
            validate(&c).map_err(|why| err(format!("config: {why}")))?;
            (c, false)
        }
        None => (infer()?, true),
    };
    check(&config)?;
    Ok((config, inferred))
}

/// Checks tensors of one weights file.
pub(crate) struct Checker<'a> {
    /// The file's tensors.
    pub list: &'a dyn TensorList,
    /// The file the errors name.
    pub path: &'a Path,
}

impl Checker<'_> {
    /// A weights error naming the file.
    pub(crate) fn err(&self, why: String) -> ModelError {
        ModelError::Weights {
            path: self.path.to_owned(),
            why,
        }
    }

    /// Linear `name` (any format `ctx.linear` runs) is `[n, k]` (out × in),
    /// with a bias when `bias`, without one otherwise.
    pub(crate) fn linear(
        &self,
        name: &str,
        n: usize,
        k: usize,
        bias: bool,
    ) -> Result<(), ModelError> {
        let l = quant::validate_layer(self.list, name).map_err(|e| self.err(e.to_string()))?;
        if (l.n, l.k) != (n, k) {
            return Err(self.err(format!(
                "`{name}` is [{}, {}] (out × in), the config implies [{n}, {k}]",
                l.n, l.k
            )));
        }
        if matches!(l.format, Format::Float8E4m3fn | Format::Float8E5m2) && l.scale.is_none() {
            // Validation takes it as ComfyUI's cast at scale 1; the float
            // kernels bind a scale, so refuse it here, by name.
            return Err(self.err(format!(
                "`{name}` is fp8 without a scale (`scale_weight` or `weight_scale`): \
                 unscaled fp8 linears are not run; use the scaled-fp8 or f16 file"
            )));
        }
        if l.has_bias != bias {
            return Err(self.err(format!(
                "`{name}` {} a bias; this architecture's {}",
                if l.has_bias { "has" } else { "has no" },
                if bias { "has one" } else { "has none" }
            )));
        }
        Ok(())
    }

    /// Tensor `name` exists with shape `shape`.
    pub(crate) fn shaped(&self, name: &str, shape: &[usize], what: &str) -> Result<(), ModelError> {
        match self.list.dtype_shape(name) {
            Some((_, s)) if s == shape => Ok(()),
            Some((_, s)) => Err(self.err(format!(
                "`{name}` has shape {s:?}, expected {shape:?} ({what})"
            ))),
            None => Err(self.err(format!("no tensor `{name}` ({what})"))),
        }
    }

    /// The shape of tensor `name`, or an error saying what it is for.
    pub(crate) fn shape_of(&self, name: &str, what: &str) -> Result<Vec<usize>, ModelError> {
        self.list
            .dtype_shape(name)
            .map(|(_, s)| s.to_vec())
            .ok_or_else(|| self.err(format!("no tensor `{name}` ({what})")))
    }
}

/// Blocks `{prefix}0.`, `{prefix}1.`, … present without a gap (ComfyUI's
/// `count_blocks`), and the highest index present (past a gap too).
pub(crate) fn count_blocks(list: &dyn TensorList, prefix: &str) -> (usize, Option<usize>) {
    let present: std::collections::BTreeSet<usize> = list
        .names()
        .iter()
        .filter_map(|n| crate::block_index::block_index(n, prefix))
        .collect();
    let run = (0..).take_while(|i| present.contains(i)).count();
    (run, present.last().copied())
}

/// The prefix under which `key` sits in the file (`""` when at the top;
/// the first one in name order where several do), or `None`.
pub(crate) fn prefix_of(list: &dyn TensorList, key: &str) -> Option<String> {
    if list.dtype_shape(key).is_some() {
        return Some(String::new());
    }
    let mut found: Vec<String> = list
        .names()
        .iter()
        .filter(|n| {
            n.len() > key.len() && n.ends_with(key) && n[..n.len() - key.len()].ends_with('.')
        })
        .map(|n| n[..n.len() - key.len()].to_owned())
        .collect();
    found.sort();
    found.into_iter().next()
}
