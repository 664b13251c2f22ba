//! Moving one weight from its file to a GPU buffer through the staging ring.
//! Raw weights go file → `pread` into a mapped slot → GPU copy, with no
//! intermediate copy; float tensors that kernels read as `f32` (biases, norm
//! weights) are converted on the host first (they are small).

use std::cell::RefCell;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use dynvram_loader::{
    ByteSource, Dtype, HostBytes, ModelFiles, TensorBytes, TensorInfo, WriteOnlyBytes,
};
use dynvram_memory::ModelId;

use crate::error::{Result, RuntimeError};
use crate::planning::PlanWeight;
use dynvram_gpu::device::{Gpu, StagingRing};

/// One weight of a model: its tensor, its block and how it is uploaded.
#[derive(Debug)]
pub(crate) struct Weight {
    pub name: String,
    pub info: TensorInfo,
    pub block: usize,
    /// Its group in the block (`BlockSpec::groups`; 0 without groups).
    pub group: usize,
    pub upload: Upload,
    /// Its bytes were scanned for NaN and infinity (on their first upload or
    /// pin, [`stage`]).
    pub checked: AtomicBool,
    /// bf16 values past f16's range were met by that scan.
    pub beyond_f16: AtomicBool,
    /// A bf16 linear weight whose resident copy is converted to f16 in
    /// place as it is uploaded, unless [`Self::beyond_f16`]
    /// (`dynvram_gpu::ops::linear::resident_bf16_as_f16`; set at open).
    pub f16_in_place: bool,
    /// Its resident copy holds f16 (it was converted as it was uploaded).
    pub resident_f16: AtomicBool,
}

impl Weight {
    /// A weight of block `block` (group `group`) uploaded as `upload`, not
    /// yet scanned or converted.
    pub fn new(name: &str, info: &TensorInfo, block: usize, group: usize, upload: Upload) -> Self {
        Self {
            name: name.to_owned(),
            info: info.clone(),
            block,
            group,
            upload,
            checked: Default::default(),
            beyond_f16: Default::default(),
            f16_in_place: false,
            resident_f16: Default::default(),
        }
    }
}

/// What moving a model's weights (uploads, pins, residency) needs to know
/// of the model, borrowed from it (`Model::view`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelView<'m> {
    /// Its id under the residency policy.
    pub id: ModelId,
    /// The file it was opened from, for errors.
    pub path: &'m Path,
    /// Its files.
    pub files: &'m std::sync::Arc<ModelFiles>,
    /// Its weights, load order.
    pub weights: &'m [Weight],
    /// Their sizes on the GPU, load order.
    pub plan_weights: &'m [PlanWeight],
    /// Activation bytes a pass needs.
    pub scratch_bytes: u64,
    /// Scratch it would use beyond that where the budget has room.
    pub scratch_wish: u64,
}

/// How a tensor's bytes are uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upload {
    /// Bytes as stored.
    Raw,
    /// Converted to `f32` from the stored float dtype.
    ToF32,
}

impl Upload {
    /// Bytes it takes on the GPU.
    pub fn gpu_size(self, info: &TensorInfo) -> u64 {
        match self {
            Self::Raw => info.len(),
            Self::ToF32 => info.shape.iter().product::<usize>() as u64 * 4,
        }
    }
}

/// How a tensor is uploaded: raw when asked or already `f32`, converted when
/// it is another float type, an error otherwise.
pub(crate) fn upload_kind(model: &Path, info: &TensorInfo, raw: bool) -> Result<Upload> {
    match (raw, info.dtype) {
        (true, _) | (false, Dtype::F32) => Ok(Upload::Raw),
        (false, Dtype::F16 | Dtype::BF16) => Ok(Upload::ToF32),
        (false, dtype) => Err(RuntimeError::Dtype {
            model: model.to_owned(),
            tensor: info.name.clone(),
            dtype,
            why: "is not a float type (f32, f16 or bf16 expected)".into(),
        }),
    }
}

/// Records the upload of weight `w` into `dst` at `offset` from its file,
/// through the staging ring. The first upload or pin of a float weight scans
/// its bytes for NaN and infinity as they pass ([`RawBytes`], [`scan_host`]):
/// the file is read once.
pub(crate) fn stage(
    model: ModelView<'_>,
    ring: &mut StagingRing,
    gpu: &Gpu,
    enc: &mut wgpu::CommandEncoder,
    w: &Weight,
    dst: &wgpu::Buffer,
    offset: u64,
) -> Result<()> {
    match w.upload {
        Upload::Raw => {
            let raw = RawBytes::of(model, w)?;
            ring.upload(&gpu.device, &gpu.queue, enc, raw.source(), dst, offset)?;
            raw.finish(model, w)?;
        }
        Upload::ToF32 => {
            let bytes = gpu_bytes(model, w)?;
            scan_host(model, w, Dtype::F32, &bytes)?;
            ring.upload(
                &gpu.device,
                &gpu.queue,
                enc,
                &HostBytes(&bytes),
                dst,
                offset,
            )?;
        }
    }
    Ok(())
}

/// Whether weight `w`'s bytes are still to be scanned for NaN and infinity:
/// each float weight is scanned once, the first time it is uploaded or
/// pinned, so resident weights are checked as they load and streamed ones
/// before their first pass computes on them; integer payloads never.
fn needs_scan(w: &Weight) -> bool {
    !w.checked.load(Ordering::Relaxed) && dynvram_quant::tensors::can_be_non_finite(w.info.dtype)
}

/// Scans host bytes of weight `w` (stored as `dtype`: its own, or f32 where
/// the upload converted them) unless they were scanned before;
/// [`RuntimeError::NonFiniteWeight`] names the first NaN or infinity.
pub(crate) fn scan_host(
    model: ModelView<'_>,
    w: &Weight,
    dtype: Dtype,
    bytes: &[u8],
) -> Result<()> {
    if !needs_scan(w) {
        return Ok(());
    }
    if let Some((i, value)) = dynvram_quant::tensors::first_non_finite(dtype, bytes) {
        return Err(non_finite(model, w, i as u64, value));
    }
    note_beyond_f16(&w.beyond_f16, dtype, bytes);
    w.checked.store(true, Ordering::Relaxed);
    Ok(())
}

/// Sets `flag` where `bytes` are bf16 (`dtype`) with a value past f16's
/// range (the weight then stays bf16 where resident ones become f16).
fn note_beyond_f16(flag: &AtomicBool, dtype: Dtype, bytes: &[u8]) {
    if dtype == Dtype::BF16 && dynvram_quant::tensors::bf16_beyond_f16(bytes) {
        flag.store(true, Ordering::Relaxed);
    }
}

/// A raw weight's file bytes as the reader pool copies them: through a
/// [`Scanning`] source where the weight is still to be scanned, else
/// straight from the file.
pub(crate) enum RawBytes<'m> {
    /// Scanned before: read as is.
    Plain(TensorBytes<'m>),
    /// Scanned as read.
    Scanning(Scanning<'m>),
}

impl<'m> RawBytes<'m> {
    /// Weight `w`'s file bytes.
    pub(crate) fn of(model: ModelView<'m>, w: &Weight) -> Result<Self> {
        let range = model.files.source(&w.name)?;
        Ok(if needs_scan(w) {
            Self::Scanning(Scanning::new(range, w.info.dtype))
        } else {
            Self::Plain(range)
        })
    }

    /// What the reader pool reads from.
    pub(crate) fn source(&self) -> &dyn ByteSource {
        match self {
            Self::Plain(range) => range,
            Self::Scanning(scan) => scan,
        }
    }

    /// After every byte was read: [`RuntimeError::NonFiniteWeight`] if the
    /// scan met NaN or infinity, else the weight is marked scanned.
    pub(crate) fn finish(&self, model: ModelView<'_>, w: &Weight) -> Result<()> {
        if let Self::Scanning(scan) = self {
            if let Some((index, value)) = scan.first() {
                return Err(non_finite(model, w, index, value));
            }
            if scan.beyond_f16.load(Ordering::Relaxed) {
                w.beyond_f16.store(true, Ordering::Relaxed);
            }
            w.checked.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A file range whose bytes are scanned for NaN and infinity on their way
/// to the destination: each reader task preads into a buffer of its
/// thread's (a task's 2 MiB stay in cache), scans it and copies it on,
/// instead of a second pass over the file. Keeps the first element found.
pub(crate) struct Scanning<'a> {
    range: TensorBytes<'a>,
    dtype: Dtype,
    /// Bytes per element.
    element: u64,
    /// The lowest (element index, value) found so far.
    first: Mutex<Option<(u64, f32)>>,
    /// bf16: a value past f16's range was read.
    beyond_f16: AtomicBool,
}

thread_local! {
    /// Each reader thread's buffer for [`Scanning`] (grown to a task once).
    static BOUNCE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl<'a> Scanning<'a> {
    fn new(range: TensorBytes<'a>, dtype: Dtype) -> Self {
        Self {
            range,
            dtype,
            element: dtype.bitsize().div_ceil(8).max(1) as u64,
            first: Mutex::new(None),
            beyond_f16: AtomicBool::new(false),
        }
    }

    /// The first non-finite element read, if any.
    fn first(&self) -> Option<(u64, f32)> {
        *self.first.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Scans `bytes`, the source's bytes from `offset`, for whole elements:
    /// those that start inside and end inside the range. An element cut by
    /// the range's end is read whole from the file here (only where a ring
    /// slot ends inside an 8-byte element), so every element is scanned by
    /// the read holding its first byte.
    fn scan(&self, offset: u64, bytes: &[u8]) -> dynvram_loader::Result<()> {
        let e = self.element;
        let skip = (e - offset % e) % e;
        let Some(whole) = bytes.get(skip as usize..) else {
            return Ok(());
        };
        let first = offset + skip;
        let mut found = dynvram_quant::tensors::first_non_finite(self.dtype, whole)
            .map(|(i, v)| ((first / e) + i as u64, v));
        let cut = whole.len() as u64 % e;
        let cut_at = first + whole.len() as u64 - cut;
        if found.is_none() && cut > 0 && cut_at + e <= self.range.len() {
            let mut one = [0u8; 8];
            let one = &mut one[..e as usize];
            self.range.read_at(cut_at, WriteOnlyBytes::from_mut(one))?;
            found = dynvram_quant::tensors::first_non_finite(self.dtype, one)
                .map(|(_, v)| (cut_at / e, v));
            note_beyond_f16(&self.beyond_f16, self.dtype, one);
        }
        note_beyond_f16(&self.beyond_f16, self.dtype, whole);
        if let Some(hit) = found {
            let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none_or(|(i, _)| hit.0 < i) {
                *first = Some(hit);
            }
        }
        Ok(())
    }
}

impl ByteSource for Scanning<'_> {
    fn len(&self) -> u64 {
        self.range.len()
    }

    fn read_at(&self, offset: u64, mut dst: WriteOnlyBytes<'_>) -> dynvram_loader::Result<()> {
        BOUNCE.with_borrow_mut(|buf| {
            buf.resize(buf.len().max(dst.len()), 0);
            let bytes = &mut buf[..dst.len()];
            self.range
                .read_at(offset, WriteOnlyBytes::from_mut(bytes))?;
            self.scan(offset, bytes)?;
            dst.copy_from_slice(bytes);
            Ok(())
        })
    }

    fn drop_behind(&self, offset: u64, len: u64) {
        self.range.drop_behind(offset, len);
    }

    fn describe(&self) -> String {
        self.range.describe()
    }
}

/// [`RuntimeError::NonFiniteWeight`] for element `index` of weight `w`:
/// the file that holds it, and where a view reads the weight, the stored
/// tensor too.
fn non_finite(model: ModelView<'_>, w: &Weight, index: u64, value: f32) -> RuntimeError {
    let element = w.info.dtype.bitsize().div_ceil(8).max(1) as u64;
    let source = model.files.source(&w.name).ok();
    let at = source.as_ref().and_then(|s| s.locate(index * element));
    let file = at.map_or_else(|| model.path.to_path_buf(), |(r, _)| r.path.to_path_buf());
    let tensor = match at {
        Some((r, _)) if r.tensor != w.name => format!("{}` from `{}", w.name, r.tensor),
        _ => w.name.clone(),
    };
    let row_len = w.info.shape.iter().skip(1).product::<usize>().max(1) as u64;
    let row = if w.info.shape.len() >= 2 {
        format!(" (row {})", index / row_len)
    } else {
        String::new()
    };
    RuntimeError::NonFiniteWeight {
        file,
        tensor,
        index,
        row,
        value,
    }
}

/// Weight `w`'s bytes as they go to the GPU (converted to `f32` where its
/// upload converts), read from its file into RAM.
pub(crate) fn gpu_bytes(model: ModelView<'_>, w: &Weight) -> Result<Vec<u8>> {
    let mut raw = vec![0u8; w.info.len() as usize];
    model.files.read_into(&w.name, 0..w.info.len(), &mut raw)?;
    Ok(match w.upload {
        Upload::Raw => raw,
        Upload::ToF32 => bytemuck::cast_slice(&to_f32(&raw, w.info.dtype)).to_vec(),
    })
}

fn to_f32(raw: &[u8], dtype: Dtype) -> Vec<f32> {
    let halves = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    match dtype {
        Dtype::F16 => halves.map(|h| half::f16::from_bits(h).to_f32()).collect(),
        Dtype::BF16 => halves.map(|h| half::bf16::from_bits(h).to_f32()).collect(),
        _ => bytemuck::pod_collect_to_vec(raw),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use dynvram_loader::FileRange;

    use super::*;

    /// A temporary file holding `bytes`.
    fn temp_file(bytes: &[u8]) -> std::fs::File {
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(bytes).expect("write");
        file
    }

    /// `len` bytes of `file` as tensor `w`'s range.
    fn range_of(file: &std::fs::File, len: usize) -> FileRange<'_> {
        FileRange {
            file,
            path: Path::new("t.safetensors"),
            tensor: "w",
            start: 0,
            len: len as u64,
        }
    }

    #[test]
    fn scanning_reads_note_bf16_values_past_f16s_range_across_cuts() {
        // 65280 (0x477F) is bf16's largest value f16 holds; 65536 (0x4780)
        // is past it, and so is -65536.
        for (big, beyond) in [(0x477Fu16, false), (0x4780, true), (0xC780, true)] {
            for cut in [2u64, 6, 64, 126] {
                let mut values = [0x3F80u16; 64];
                values[cut as usize / 2] = big;
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                let file = temp_file(&bytes);
                let scan = Scanning::new(range_of(&file, bytes.len()).into(), Dtype::BF16);
                let mut out = [0u8; 128];
                let (a, b) = out.split_at_mut(cut as usize);
                scan.read_at(cut, WriteOnlyBytes::from_mut(b))
                    .expect("read");
                scan.read_at(0, WriteOnlyBytes::from_mut(a)).expect("read");
                assert_eq!(scan.first(), None);
                assert_eq!(
                    scan.beyond_f16.load(Ordering::Relaxed),
                    beyond,
                    "{big:#06x} at byte {cut}"
                );
            }
        }
    }

    /// A scan split into reads as ring slots split an upload: every
    /// element is found by the read holding its first byte, also an f64
    /// cut by a read's end (slots end on 4 bytes, elements may be 8).
    #[test]
    fn scanning_reads_find_the_first_non_finite_element_across_cuts() {
        let elements = 64u64;
        for bad in [0, 1, 2, 31, 63] {
            for cut in [4u64, 12, 100, 256, 508] {
                let mut values = vec![1.5f64; elements as usize];
                values[bad as usize] = f64::NAN;
                if let Some(later) = values.get_mut(bad as usize + 7) {
                    *later = f64::INFINITY;
                }
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                let file = temp_file(&bytes);
                let range = range_of(&file, bytes.len());
                let scan = Scanning::new(range.into(), Dtype::F64);
                let mut out = vec![0u8; (elements * 8) as usize];
                let (a, b) = out.split_at_mut(cut as usize);
                scan.read_at(cut, WriteOnlyBytes::from_mut(b))
                    .expect("second read");
                scan.read_at(0, WriteOnlyBytes::from_mut(a))
                    .expect("first read");
                let found = scan.first().expect("a NaN is found");
                assert_eq!(found.0, bad, "NaN at {bad}, cut at byte {cut}");
                assert!(found.1.is_nan());
                let copied: Vec<f64> = out
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                let same = copied
                    .iter()
                    .zip(&values)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "the bytes are copied on unchanged");
            }
        }
    }
}
