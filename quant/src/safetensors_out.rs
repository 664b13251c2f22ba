//! Writes a safetensors file tensor by tensor: new tensors from memory,
//! unchanged ones copied from the input with positional reads in chunks, so
//! neither the whole output nor the input's map is ever touched (a file
//! shrinking under us is an error naming it, not SIGBUS).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use dynvram_loader::{LoadError, SafetensorsFile};
use safetensors::tensor::{Metadata, TensorInfo};

use crate::tensors::Dtype;

/// Bytes copied per positional read when a tensor is carried over.
const COPY_CHUNK: usize = 8 << 20;

/// Where an output tensor's bytes come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// Made here.
    Owned(Vec<u8>),
    /// The input tensor of the same name, unchanged.
    Input,
}

/// One tensor of the output.
#[derive(Debug)]
pub(crate) struct OutTensor {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub len: usize,
    pub source: Source,
}

impl OutTensor {
    /// A tensor made here.
    pub fn owned(dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> Self {
        Self {
            dtype,
            shape,
            len: data.len(),
            source: Source::Owned(data),
        }
    }
}

/// Why writing failed: the output (as an I/O error of the writer) or a read
/// of the input (named by the loader).
#[derive(Debug)]
pub(crate) enum WriteFault {
    Output(std::io::Error),
    Input(LoadError),
    Header(safetensors::SafeTensorError),
}

/// Writes `tensors` as a safetensors file into `w`, in the order the
/// `safetensors` crate uses (dtype alignment descending, then name), with
/// the header padded with spaces to a multiple of 8 bytes.
pub(crate) fn write(
    w: &mut dyn Write,
    input: &SafetensorsFile,
    tensors: &BTreeMap<String, OutTensor>,
    metadata: Option<HashMap<String, String>>,
) -> Result<(), WriteFault> {
    let mut order: Vec<(&String, &OutTensor)> = tensors.iter().collect();
    order.sort_by(|(an, a), (bn, b)| b.dtype.cmp(&a.dtype).then(an.cmp(bn)));
    let mut offset = 0;
    let infos = order
        .iter()
        .map(|(name, t)| {
            let info = TensorInfo {
                dtype: t.dtype,
                shape: t.shape.clone(),
                data_offsets: (offset, offset + t.len),
            };
            offset += t.len;
            ((*name).clone(), info)
        })
        .collect();
    let header = Metadata::new(metadata, infos).map_err(WriteFault::Header)?;
    let mut header = serde_json::to_string(&header)
        .map_err(|e| WriteFault::Header(e.into()))?
        .into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let out = |r: std::io::Result<()>| r.map_err(WriteFault::Output);
    out(w.write_all(&(header.len() as u64).to_le_bytes()))?;
    out(w.write_all(&header))?;
    let mut chunk = Vec::new();
    for (name, t) in order {
        match &t.source {
            Source::Owned(data) => out(w.write_all(data))?,
            Source::Input => {
                let len = t.len as u64;
                let mut at = 0;
                while at < len {
                    let n = (len - at).min(COPY_CHUNK as u64);
                    chunk.resize(n as usize, 0);
                    input
                        .read_into(name, at..at + n, &mut chunk)
                        .map_err(WriteFault::Input)?;
                    out(w.write_all(&chunk))?;
                    at += n;
                }
            }
        }
    }
    out(w.flush())
}
