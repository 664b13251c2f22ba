//! The model's files seen as the quant crate's [`TensorList`], so layer
//! metadata and shapes are validated with the same code as everywhere else.

use std::borrow::Cow;
use std::collections::HashMap;

use dynvram_loader::{Dtype, LoadError, ModelFiles};
use dynvram_quant::TensorList;

/// A [`TensorList`] over every file of a model.
#[derive(Debug)]
pub struct FilesList<'a> {
    files: &'a ModelFiles,
    metadata: HashMap<String, String>,
}

impl<'a> FilesList<'a> {
    /// Wraps the files; header metadata of all files is merged (first wins).
    pub fn new(files: &'a ModelFiles) -> Self {
        let mut metadata = HashMap::new();
        for f in files.files() {
            for (k, v) in f.metadata() {
                metadata.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        Self { files, metadata }
    }

    /// A tensor's bytes read with `pread` (a file truncated under us is an
    /// error naming it, never a fault), or why they could not be read.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, LoadError> {
        let info = self
            .files
            .info(name)
            .ok_or_else(|| LoadError::NoSuchTensor {
                path: self
                    .files
                    .files()
                    .first()
                    .map(|f| f.path().to_owned())
                    .unwrap_or_default(),
                tensor: name.to_owned(),
            })?;
        let mut buf = vec![0u8; usize::try_from(info.len()).unwrap_or(usize::MAX)];
        self.files.read_into(name, 0..info.len(), &mut buf)?;
        Ok(buf)
    }
}

impl TensorList for FilesList<'_> {
    fn names(&self) -> Vec<String> {
        self.files.tensors().map(|t| t.name.clone()).collect()
    }

    fn dtype_shape(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        self.files.info(name).map(|t| (t.dtype, t.shape.clone()))
    }

    fn bytes(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        self.read(name).ok().map(Cow::Owned)
    }

    fn header_metadata(&self) -> Option<&HashMap<String, String>> {
        Some(&self.metadata)
    }
}
