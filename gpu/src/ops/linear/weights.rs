//! A linear layer's tensors on the GPU, as buffer regions the runtime places
//! (resident buffers or transient arenas), and an upload helper.

use std::sync::Arc;

use dynvram_quant::reference::LayerBytes;
use dynvram_quant::tensors::floats_to_f32;
use dynvram_quant::{Format, QuantLayer};

use super::LinearError;
use crate::device::Gpu;

/// A byte range of a GPU buffer. Bound as a storage buffer: the offset must be
/// a multiple of `min_storage_buffer_offset_alignment` and the buffer needs
/// `STORAGE` usage.
#[derive(Debug, Clone)]
pub struct Region {
    /// The buffer.
    pub buffer: Arc<wgpu::Buffer>,
    /// Byte offset.
    pub offset: u64,
    /// Byte size.
    pub size: u64,
}

impl Region {
    /// The whole of `buffer`.
    pub fn whole(buffer: Arc<wgpu::Buffer>) -> Self {
        let size = buffer.size();
        Self {
            buffer,
            offset: 0,
            size,
        }
    }
}

/// Consecutive weight rows held in one region (a weight larger than one
/// buffer is several parts; row order is part order).
#[derive(Debug, Clone)]
pub struct WeightPart {
    /// Where the rows are.
    pub region: Region,
    /// How many rows of `[N, ·]`.
    pub rows: u64,
}

/// One linear layer's GPU-side tensors.
#[derive(Debug, Clone)]
pub struct LinearWeights {
    /// Storage format (decides the kernels).
    pub format: Format,
    /// out_features.
    pub n: u64,
    /// in_features.
    pub k: u64,
    /// The weight rows, in order; their `rows` sum to `n` (usually one
    /// part: inline, as a layer's weights are described per token).
    pub parts: smallvec::SmallVec<[WeightPart; 1]>,
    /// `F32` weight scale: `[N]` (convrot_w4a4, rotated int8_tensorwise) or one
    /// value (int8_tensorwise, fp8); `None` for plain float weights.
    pub scale: Option<Region>,
    /// `F32 [N]` bias.
    pub bias: Option<Region>,
}

/// Bytes of one weight row of `format` with `k` columns.
pub fn row_bytes(format: Format, k: u64) -> u64 {
    match format {
        Format::ConvrotW4a4 { .. } => k / 2,
        Format::F32 => 4 * k,
        Format::F16 | Format::Bf16 => 2 * k,
        _ => k,
    }
}

impl LinearWeights {
    /// Bytes of one weight row.
    pub fn row_bytes(&self) -> u64 {
        row_bytes(self.format, self.k)
    }

    /// Uploads a layer's host tensors into fresh buffers (`STORAGE | COPY_DST |
    /// COPY_SRC`): the weight split into parts of at most `max_buffer_size`,
    /// the scale as stored, the bias converted to `F32`. Writes go through the
    /// queue and land before the next submit.
    pub fn upload(
        gpu: &Gpu,
        layer: &QuantLayer,
        bytes: LayerBytes<'_>,
    ) -> Result<Self, LinearError> {
        let _span =
            tracing::info_span!("upload_linear", layer = %layer.name, n = layer.n, k = layer.k)
                .entered();
        let (n, k) = (layer.n as u64, layer.k as u64);
        let rb = row_bytes(layer.format, k);
        let data_err = |what: String| LinearError::LayerData {
            layer: layer.name.clone(),
            what,
        };
        if bytes.weight.len() as u64 != n * rb {
            return Err(data_err(format!(
                "weight has {} bytes, expected N·{rb} = {}",
                bytes.weight.len(),
                n * rb
            )));
        }
        let rows_per_part = (gpu.caps.max_buffer_size / rb.max(1)).max(1);
        let mut parts = smallvec::SmallVec::new();
        let mut row = 0;
        while row < n {
            let rows = rows_per_part.min(n - row);
            let src = &bytes.weight[(row * rb) as usize..((row + rows) * rb) as usize];
            let label = format!("{}.weight[{row}..{}]", layer.name, row + rows);
            parts.push(WeightPart {
                region: upload_bytes(gpu, &label, src)?,
                rows,
            });
            row += rows;
        }
        let scale = match (bytes.scale, layer.format) {
            (_, Format::F32 | Format::F16 | Format::Bf16) => None,
            (Some(s), _) => Some(upload_bytes(
                gpu,
                &format!("{}.weight_scale", layer.name),
                s,
            )?),
            (None, _) => return Err(data_err("weight_scale is missing".into())),
        };
        let bias = match (bytes.bias, layer.bias_dtype) {
            (Some(b), Some(dtype)) => {
                let f = floats_to_f32(dtype, b)
                    .ok_or_else(|| data_err(format!("bias dtype {dtype:?} is not a float")))?;
                if f.len() as u64 != n {
                    return Err(data_err(format!(
                        "bias has {} values, expected N = {n}",
                        f.len()
                    )));
                }
                Some(upload_bytes(
                    gpu,
                    &format!("{}.bias", layer.name),
                    bytemuck::cast_slice(&f),
                )?)
            }
            _ => None,
        };
        Ok(Self {
            format: layer.format,
            n,
            k,
            parts,
            scale,
            bias,
        })
    }
}

/// A fresh buffer holding `data` (padded to a multiple of 4 bytes).
fn upload_bytes(gpu: &Gpu, label: &str, data: &[u8]) -> Result<Region, LinearError> {
    let size = (data.len() as u64).div_ceil(4).max(1) * 4;
    let buffer = gpu.create_buffer(
        label,
        size,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
    )?;
    let aligned = data.len() / 4 * 4;
    gpu.queue.write_buffer(&buffer, 0, &data[..aligned]);
    if aligned < data.len() {
        let mut tail = [0u8; 4];
        tail[..data.len() - aligned].copy_from_slice(&data[aligned..]);
        gpu.queue.write_buffer(&buffer, aligned as u64, &tail);
    }
    Ok(Region {
        buffer: Arc::new(buffer),
        offset: 0,
        size: data.len() as u64,
    })
}
