//! The model's files seen as the quant crate's [`TensorList`], so layer
//! metadata and shapes are validated with the same code as everywhere else.

use std::borrow::Cow;
use std::collections::HashMap;

use dynvram_loader::{Dtype, ModelFiles};
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
}

impl TensorList for FilesList<'_> {
    fn names(&self) -> Vec<String> {
        self.files.tensors().map(|(_, t)| t.name.clone()).collect()
    }

    fn dtype_shape(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        self.files
            .get(name)
            .map(|(_, t)| (t.dtype, t.shape.clone()))
    }

    fn bytes(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        let (file, info) = self.files.get(name)?;
        let mut buf = vec![0u8; usize::try_from(info.len()).ok()?];
        file.read_into(name, 0..info.len(), &mut buf).ok()?;
        Some(Cow::Owned(buf))
    }

    fn header_metadata(&self) -> Option<&HashMap<String, String>> {
        Some(&self.metadata)
    }
}
