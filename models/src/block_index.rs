//! Block (layer) indices in tensor names, one parser for every architecture.

/// `N` of a tensor named `{prefix}{N}.…`, or `None` for any other name.
pub(crate) fn block_index(name: &str, prefix: &str) -> Option<usize> {
    name.strip_prefix(prefix)?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::block_index;

    #[test]
    fn reads_the_index_after_the_prefix() {
        assert_eq!(
            block_index("model.layers.12.mlp.up_proj.weight", "model.layers."),
            Some(12)
        );
        assert_eq!(block_index("blocks.0.mlp.fc1.weight", "blocks."), Some(0));
        assert_eq!(block_index("blocks.x.mlp", "blocks."), None);
        assert_eq!(block_index("model.norm.weight", "model.layers."), None);
        assert_eq!(block_index("double_blocks.3", "double_blocks."), Some(3));
    }
}
