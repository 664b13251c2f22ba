//! Reading a Hugging Face `config.json` (the text encoders' configs, a
//! diffusers pipeline's `model_index.json` and scheduler config):
//! the file as a JSON object and typed getters whose errors name the key.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::ModelError;

/// A parsed `config.json` and where it came from.
pub(crate) struct HfConfig {
    path: PathBuf,
    obj: Map<String, Value>,
}

impl HfConfig {
    /// Reads and parses `path` (a JSON object).
    pub(crate) fn read(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })?;
        let v: Value = serde_json::from_str(&text).map_err(|e| ModelError::Config {
            path: path.to_owned(),
            why: format!("not JSON: {e}"),
        })?;
        match v {
            Value::Object(obj) => Ok(Self {
                path: path.to_owned(),
                obj,
            }),
            _ => Err(ModelError::Config {
                path: path.to_owned(),
                why: "the config is not a JSON object".into(),
            }),
        }
    }

    /// The object under `key` (e.g. a `CLIPConfig`'s `text_config`) as a
    /// config of the same file, if there is one.
    pub(crate) fn nested(&self, key: &str) -> Option<Self> {
        match self.obj.get(key) {
            Some(Value::Object(obj)) => Some(Self {
                path: self.path.clone(),
                obj: obj.clone(),
            }),
            _ => None,
        }
    }

    /// A config error naming this file.
    pub(crate) fn err(&self, why: String) -> ModelError {
        ModelError::Config {
            path: self.path.clone(),
            why,
        }
    }

    /// The integer `key` (≥ 1).
    pub(crate) fn count(&self, key: &str) -> Result<usize, ModelError> {
        match self.obj.get(key).map(Value::as_u64) {
            Some(Some(x)) if x >= 1 => {
                usize::try_from(x).map_err(|_| self.err(format!("`{key}` = {x} is too large")))
            }
            Some(_) => Err(self.err(format!("`{key}` must be a positive integer"))),
            None => Err(self.err(format!("missing `{key}`"))),
        }
    }

    /// The number `key`, or `default` where it is absent.
    pub(crate) fn number_or(&self, key: &str, default: f64) -> Result<f64, ModelError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.err(format!("`{key}` must be a number"))),
        }
    }

    /// The boolean `key`, or `default` where it is absent.
    pub(crate) fn flag_or(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(format!("`{key}` must be true or false"))),
        }
    }

    /// The class of component `key` of a diffusers `model_index.json`
    /// (`["library", "Class"]`), if present.
    pub(crate) fn class_of(&self, key: &str) -> Result<Option<String>, ModelError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => match a.as_slice() {
                [_, Value::String(class)] => Ok(Some(class.clone())),
                [_, Value::Null] => Ok(None),
                _ => Err(self.err(format!("`{key}` must be [library, class]"))),
            },
            Some(_) => Err(self.err(format!("`{key}` must be [library, class]"))),
        }
    }

    /// The string `key`, if present.
    pub(crate) fn string(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.obj.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(format!("`{key}` must be a string"))),
        }
    }
}
