//! The one error type of the loader: every variant names the file, the tensor
//! and the sizes involved, so a user can tell which download is broken.

use std::path::PathBuf;

/// What went wrong while indexing or reading tensor bytes.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// An operating-system call on a file failed (open, stat, map, spawn…).
    #[error("{op} `{}`: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file cannot even hold the 8-byte header length.
    #[error("`{}` is {len} bytes, shorter than the 8-byte safetensors header length", path.display())]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
    /// The header length points past the end of the file.
    #[error("`{}`: header length {header_len} + 8 exceeds the file length {file_len}", path.display())]
    HeaderPastEnd {
        /// The file.
        path: PathBuf,
        /// The declared header length.
        header_len: u64,
        /// The file length.
        file_len: u64,
    },
    /// The header is larger than any real model writes (guards huge allocations).
    #[error("`{}`: header length {header_len} exceeds the limit of {limit} bytes", path.display())]
    HeaderTooLarge {
        /// The file.
        path: PathBuf,
        /// The declared header length.
        header_len: u64,
        /// The largest accepted header.
        limit: u64,
    },
    /// The header is not valid UTF-8 JSON of the expected shape.
    #[error("`{}`: invalid safetensors header: {message}", path.display())]
    HeaderJson {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// One header entry has the wrong shape (missing field, wrong type).
    #[error("`{}`: tensor `{tensor}`: {message}", path.display())]
    BadEntry {
        /// The file.
        path: PathBuf,
        /// The entry's name.
        tensor: String,
        /// What is wrong with it.
        message: String,
    },
    /// A dtype this build does not know.
    #[error("`{}`: tensor `{tensor}` has unknown dtype `{dtype}`", path.display())]
    UnknownDtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The dtype string as written.
        dtype: String,
    },
    /// The element count overflows or is not a whole number of bytes.
    #[error("`{}`: tensor `{tensor}` shape {shape:?} of {dtype:?}: {message}", path.display())]
    BadShape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: safetensors::Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Why the byte count cannot be computed.
        message: String,
    },
    /// dtype × shape does not match the span given by the offsets.
    #[error(
        "`{}`: tensor `{tensor}` is {dtype:?} {shape:?} = {expected} bytes but its offsets span {actual} bytes",
        path.display()
    )]
    ByteCountMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: safetensors::Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes implied by dtype and shape.
        expected: u64,
        /// Bytes between the offsets.
        actual: u64,
    },
    /// The offsets run backwards or past the data section.
    #[error(
        "`{}`: tensor `{tensor}` offsets [{begin}, {end}) are outside the data section of {data_len} bytes",
        path.display()
    )]
    OffsetsOutOfRange {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Start offset (relative to the data section).
        begin: u64,
        /// End offset (relative to the data section).
        end: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// Two tensors share bytes.
    #[error(
        "`{}`: tensor `{tensor}` [{begin}, {end}) overlaps tensor `{other}` [{other_begin}, {other_end})",
        path.display()
    )]
    Overlap {
        /// The file.
        path: PathBuf,
        /// The later tensor.
        tensor: String,
        /// Its start.
        begin: u64,
        /// Its end.
        end: u64,
        /// The earlier tensor it overlaps.
        other: String,
        /// That tensor's start.
        other_begin: u64,
        /// That tensor's end.
        other_end: u64,
    },
    /// A tensor name that the file or model does not contain.
    #[error("`{}` has no tensor `{tensor}`", path.display())]
    NoSuchTensor {
        /// The file or index searched.
        path: PathBuf,
        /// The missing name.
        tensor: String,
    },
    /// The same tensor name appears in two files of one model.
    #[error("tensor `{tensor}` is in both `{}` and `{}`", first.display(), second.display())]
    DuplicateTensor {
        /// The name.
        tensor: String,
        /// The first file holding it.
        first: PathBuf,
        /// The second file holding it.
        second: PathBuf,
    },
    /// A `model.safetensors.index.json` that cannot be used.
    #[error("`{}`: invalid index: {message}", path.display())]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A [`crate::TensorView`] that the stored tensors cannot make: a part
    /// missing, rows outside it, parts of different dtypes or row widths,
    /// a shape that is not the parts' rows.
    #[error("`{}`: tensor `{tensor}` as read from the stored tensors: {why}", path.display())]
    BadView {
        /// The file (the first of the model where no part names one).
        path: PathBuf,
        /// The tensor as the model reads it.
        tensor: String,
        /// What does not fit.
        why: String,
    },
    /// A read asked for bytes outside the tensor.
    #[error(
        "`{}`: tensor `{tensor}`: range [{offset}, {offset}+{len}) is outside its {tensor_len} bytes",
        path.display()
    )]
    RangeOutsideTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Requested start within the tensor.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The tensor's length.
        tensor_len: u64,
    },
    /// The file ended before the bytes the header promised (truncated on disk
    /// or while it was open).
    #[error(
        "`{}`: tensor `{tensor}`: short read at file offset {offset}: expected {expected} bytes, got {got}",
        file.display()
    )]
    ShortRead {
        /// The file.
        file: PathBuf,
        /// The tensor being read.
        tensor: String,
        /// File offset where the failing read started.
        offset: u64,
        /// Bytes asked for.
        expected: u64,
        /// Bytes obtained before end of file.
        got: u64,
    },
    /// The OS reported an error while reading tensor bytes.
    #[error("`{}`: tensor `{tensor}`: read error at file offset {offset}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// File offset of the failing read.
        offset: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file changed length since it was opened (memory-mapped access is
    /// refused rather than risking SIGBUS).
    #[error("`{}` changed since it was opened: {expected} bytes then, {actual} now", file.display())]
    FileChanged {
        /// The file.
        file: PathBuf,
        /// Length at open.
        expected: u64,
        /// Length now.
        actual: u64,
    },
    /// A reader thread panicked (a bug); the read is reported as failed.
    #[error("reader thread panicked while reading {what}")]
    ReaderPanicked {
        /// The source being read.
        what: String,
    },
    /// The reader pool's threads are gone.
    #[error("reader pool is shut down")]
    PoolShutDown,
    /// The data section holds bytes past the last tensor (the `safetensors`
    /// crate refuses such files too).
    #[error(
        "`{}`: {} bytes after the last tensor: the tensors end at byte {used} of the {data_len}-byte data section (a damaged or foreign file)",
        path.display(), data_len - used
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Where the last tensor ends, relative to the data section.
        used: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// An output path resolves to something the command reads
    /// ([`crate::output_path`]): writing it would destroy an input.
    #[error(
        "output `{}` resolves to `{}`, which this command reads (input `{}`): choose another output",
        output.display(), resolved.display(), input.display()
    )]
    OutputIsInput {
        /// The output as given.
        output: PathBuf,
        /// The input as given.
        input: PathBuf,
        /// What the output resolved to: the input, a folder holding it, or
        /// a file of an input folder.
        resolved: PathBuf,
    },
    /// An output folder exists with files in it and `--force` was not given.
    #[error(
        "output folder `{}` exists and is not empty: remove it, choose another, or pass --force to replace it",
        path.display()
    )]
    OutputNotEmpty {
        /// The folder.
        path: PathBuf,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = LoadError> = std::result::Result<T, E>;
