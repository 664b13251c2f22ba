//! [`ModelFiles`]: a model spread over several safetensors files (a list,
//! a folder, or a sharded model's `*.safetensors.index.json`), its tensors
//! as stored or through [`TensorView`]s.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;

use crate::error::{LoadError, Result};
use crate::index::{SafetensorsFile, TensorInfo};
use crate::source::ByteSource;
use crate::views::{TensorBytes, TensorView, Views};
use crate::write_only::WriteOnlyBytes;

/// Several safetensors files read as one model: the tensors they store,
/// or, after [`ModelFiles::with_views`], the tensors a model reads made of
/// them.
#[derive(Debug)]
pub struct ModelFiles {
    files: Vec<SafetensorsFile>,
    by_name: HashMap<String, usize>,
    /// Set by [`ModelFiles::with_views`]: then the only names answered.
    views: Option<Views>,
}

/// The `weight_map` of a sharded model's index file.
#[derive(Debug, serde::Deserialize)]
struct IndexJson {
    weight_map: BTreeMap<String, String>,
}

impl ModelFiles {
    /// Opens a model: a `*.json` index, a directory (its
    /// `model.safetensors.index.json`, else every `*.safetensors` in it), or a
    /// single safetensors file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            if index.is_file() {
                return Self::open_index(index);
            }
            let mut files = std::fs::read_dir(path)
                .map_err(|source| LoadError::Io {
                    path: path.to_owned(),
                    op: "list",
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
                .collect::<Vec<_>>();
            files.sort();
            return Self::from_files(files);
        }
        if path.extension().is_some_and(|e| e == "json") {
            return Self::open_index(path);
        }
        Self::from_files([path])
    }

    /// Opens every file and merges their tensors; a name in two files is an error.
    pub fn from_files<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Self> {
        let files = paths
            .into_iter()
            .map(SafetensorsFile::open)
            .collect::<Result<Vec<_>>>()?;
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            for t in f.tensors() {
                if let Some(&first) = by_name.get(&t.name) {
                    return Err(LoadError::DuplicateTensor {
                        tensor: t.name.clone(),
                        first: files[first].path().to_owned(),
                        second: f.path().to_owned(),
                    });
                }
                by_name.insert(t.name.clone(), i);
            }
        }
        Ok(Self {
            files,
            by_name,
            views: None,
        })
    }

    /// Opens a `model.safetensors.index.json`: each shard once, and checks
    /// that every tensor in `weight_map` is in the shard it names.
    pub fn open_index(index: impl AsRef<Path>) -> Result<Self> {
        let index = index.as_ref();
        let _span = tracing::debug_span!("model_index_open", path = %index.display()).entered();
        let text = std::fs::read_to_string(index).map_err(|source| LoadError::Io {
            path: index.to_owned(),
            op: "read",
            source,
        })?;
        let parsed: IndexJson = serde_json::from_str(&text).map_err(|e| LoadError::BadIndex {
            path: index.to_owned(),
            message: e.to_string(),
        })?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut shard_of: HashMap<&str, usize> = HashMap::new();
        let mut files = Vec::new();
        let mut by_name = HashMap::new();
        for (tensor, shard) in &parsed.weight_map {
            if Path::new(shard).is_absolute() || shard.contains("..") {
                return Err(LoadError::BadIndex {
                    path: index.to_owned(),
                    message: format!(
                        "shard `{shard}` of `{tensor}` is not a file beside the index"
                    ),
                });
            }
            let i = match shard_of.get(shard.as_str()) {
                Some(&i) => i,
                None => {
                    files.push(SafetensorsFile::open(dir.join(shard))?);
                    shard_of.insert(shard, files.len() - 1);
                    files.len() - 1
                }
            };
            if files[i].get(tensor).is_none() {
                return Err(LoadError::NoSuchTensor {
                    path: files[i].path().to_owned(),
                    tensor: tensor.clone(),
                });
            }
            by_name.insert(tensor.clone(), i);
        }
        Ok(Self {
            files,
            by_name,
            views: None,
        })
    }

    /// The model read through `views` (see [`crate::TensorView`]): from
    /// now on its tensors are the views, and only they; the stored tensors
    /// they do not name are out of sight. Every part is checked here.
    pub fn with_views(self, views: &[TensorView]) -> Result<Self> {
        let resolved = Views::resolve(views, &self.files, |name| {
            let i = *self.by_name.get(name)?;
            Some((i, self.files[i].get(name)?))
        })?;
        Ok(Self {
            views: Some(resolved),
            ..self
        })
    }

    /// Whether the tensors are views ([`Self::with_views`]).
    pub fn has_views(&self) -> bool {
        self.views.is_some()
    }

    /// The stored tensor `name` with its file's index.
    fn stored(&self, name: &str) -> Option<(&SafetensorsFile, &TensorInfo)> {
        let file = &self.files[*self.by_name.get(name)?];
        Some((file, file.get(name)?))
    }

    /// The tensor `name` as the model reads it: its dtype, shape and byte
    /// count (for a view, `range` is `0..len`: its bytes are its parts').
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        match &self.views {
            Some(v) => Some(&v.tensors[*v.by_name.get(name)?].info),
            None => self.stored(name).map(|(_, t)| t),
        }
    }

    /// The file holding `name` (a view's first part's), for messages.
    pub fn path_of(&self, name: &str) -> Option<&Path> {
        match &self.views {
            Some(v) => {
                let r = &v.tensors[*v.by_name.get(name)?];
                r.pieces.first().map(|p| self.files[p.file].path())
            }
            None => self.stored(name).map(|(f, _)| f.path()),
        }
    }

    /// The bytes of `name` for the reader pool and the ring (read with
    /// `pread`: see the module's documentation).
    pub fn source(&self, name: &str) -> Result<TensorBytes<'_>> {
        let missing = || LoadError::NoSuchTensor {
            path: self
                .files
                .first()
                .map(|f| f.path().to_owned())
                .unwrap_or_default(),
            tensor: name.to_owned(),
        };
        match &self.views {
            Some(v) => {
                let r = &v.tensors[*v.by_name.get(name).ok_or_else(missing)?];
                Ok(TensorBytes::view(&self.files, r))
            }
            None => {
                let (file, _) = self.stored(name).ok_or_else(missing)?;
                Ok(file.source(name)?.into())
            }
        }
    }

    /// Copies `range` (relative to the tensor's start) of `name` into
    /// `dst` with positional reads; `dst.len()` must equal the range length.
    pub fn read_into(&self, name: &str, range: Range<u64>, dst: &mut [u8]) -> Result<()> {
        let source = self.source(name)?;
        let len = range.end.saturating_sub(range.start);
        if range.start > range.end || len != dst.len() as u64 {
            return Err(LoadError::RangeOutsideTensor {
                path: self.path_of(name).map(Path::to_owned).unwrap_or_default(),
                tensor: name.to_owned(),
                offset: range.start,
                len: dst.len() as u64,
                tensor_len: source.len(),
            });
        }
        source.read_at(range.start, WriteOnlyBytes::from_mut(dst))
    }

    /// The files of the model.
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }

    /// Every tensor of the model: the views in the order given, else the
    /// stored ones in file then offset order.
    pub fn tensors(&self) -> Box<dyn Iterator<Item = &TensorInfo> + '_> {
        match &self.views {
            Some(v) => Box::new(v.tensors.iter().map(|r| &r.info)),
            None => Box::new(self.files.iter().enumerate().flat_map(move |(i, f)| {
                f.tensors()
                    .iter()
                    .filter(move |t| self.by_name.get(&t.name) == Some(&i))
            })),
        }
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        match &self.views {
            Some(v) => v.tensors.len(),
            None => self.by_name.len(),
        }
    }

    /// Whether the model has no tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
