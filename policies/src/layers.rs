//! Layered policies: a file that `extends` base files. The crate does no
//! I/O: the caller's loader turns an `extends` entry into a name and text,
//! and this module detects cycles, merges the layers and lints across them.
//!
//! - Deny rules, ask rules and credentials of every layer apply.
//! - Rules keep the file and line they were written at, so decisions name
//!   the layer that made them.
//! - Lists are merged base-first (a file's bases, in `extends` order,
//!   before the file itself), so where two rules of the same kind match, the
//!   base's rule is the one named.
//! - `default` is the top file's own, else that of the nearest base that
//!   sets one (breadth-first in `extends` order), else deny.
//! - A credential name defined twice across layers is an error at the
//!   later definition.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::compile::{Compiled, compile};
use crate::decision::DefaultAction;
use crate::error::{Lint, PolicyError, SourceMap};
use crate::raw::RawPolicy;

/// A base file as the caller's loader read it.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// How decisions and messages name the file (e.g. its path). The same
    /// file must always get the same name: cycles are detected by name.
    pub name: String,
    pub text: String,
}

/// Why the loader could not read a base file; shown after the position of
/// the `extends` entry.
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// One parsed file of a layered policy.
#[derive(Debug)]
pub(crate) struct Layer {
    pub map: SourceMap,
    pub compiled: Compiled,
    /// Indices (into the layer list) of the files this one extends, in order.
    pub extends: Vec<usize>,
}

/// Parses the top file and, through `load`, every file it extends.
/// Returns the layers in merge order (every file after its bases; the top
/// file last).
pub(crate) fn read_layers(
    name: &str,
    text: &str,
    load: &mut dyn FnMut(&str, &str) -> Result<Loaded, LoadError>,
) -> Result<Vec<Layer>, PolicyError> {
    let mut reader = Reader {
        load,
        layers: Vec::new(),
        names: Vec::new(),
        stack: Vec::new(),
    };
    reader.visit(name, text)?;
    Ok(reader.layers)
}

struct Reader<'l> {
    load: &'l mut dyn FnMut(&str, &str) -> Result<Loaded, LoadError>,
    layers: Vec<Layer>,
    /// The name of each layer, by index.
    names: Vec<Arc<str>>,
    /// Files being read, outermost first, to report a cycle as a path.
    stack: Vec<Arc<str>>,
}

impl Reader<'_> {
    fn visit(&mut self, name: &str, text: &str) -> Result<usize, PolicyError> {
        let text: Arc<str> = text.into();
        let name: Arc<str> = name.into();
        let map = SourceMap::new(name.clone(), text.clone());
        let mut raw: RawPolicy = toml::from_str(&text).map_err(|e| map.toml_error(&e))?;
        let entries = raw
            .extends
            .take()
            .map(|e| e.into_inner())
            .unwrap_or_default();
        let compiled = compile(&map, raw)?;
        self.stack.push(name.clone());
        let mut extends = Vec::new();
        for entry in &entries {
            let loaded = (self.load)(&name, entry.get_ref()).map_err(|e| {
                map.error(
                    entry.span(),
                    format!(
                        "cannot read base policy {:?}: {e}; fix the path (relative to this file) or remove it from `extends`",
                        entry.get_ref()
                    ),
                )
            })?;
            if let Some(start) = self.stack.iter().position(|n| **n == *loaded.name) {
                let mut cycle: Vec<&str> = self.stack[start..].iter().map(|n| &**n).collect();
                cycle.push(&loaded.name);
                return Err(map.error(
                    entry.span(),
                    format!(
                        "`extends` cycle: {}; a base policy cannot extend a file that extends it",
                        cycle.join(" -> ")
                    ),
                ));
            }
            let index = match self.names.iter().position(|n| **n == *loaded.name) {
                // A diamond (two bases sharing one) reads the shared file once.
                Some(index) => index,
                None => self.visit(&loaded.name, &loaded.text)?,
            };
            if !extends.contains(&index) {
                extends.push(index);
            }
        }
        self.stack.pop();
        self.layers.push(Layer {
            map,
            compiled,
            extends,
        });
        self.names.push(name);
        Ok(self.layers.len() - 1)
    }
}

/// One policy's rules from all layers (see the module docs for the order).
pub(crate) fn merge(layers: &[Layer]) -> Result<Compiled, PolicyError> {
    let mut merged = Compiled::empty(default_of(layers));
    // Where each merged credential was written, to name the first of two.
    let mut origins: Vec<(&SourceMap, usize)> = Vec::new();
    for layer in layers {
        let own = &layer.compiled;
        for rule in &own.allow {
            let mut rule = rule.clone();
            rule.rule_ref = rule.rule_ref.reindexed(merged.allow.len());
            merged.allow.push(rule);
        }
        for rule in &own.deny {
            let mut rule = rule.clone();
            rule.rule_ref = rule.rule_ref.reindexed(merged.deny.len());
            merged.deny.push(rule);
        }
        for rule in &own.ask {
            let mut rule = rule.clone();
            rule.rule_ref = rule.rule_ref.reindexed(merged.ask.len());
            merged.ask.push(rule);
        }
        for (credential, span) in own.credentials.iter().zip(&own.credential_spans) {
            if let Some(earlier) = merged
                .credentials
                .iter()
                .position(|c| c.name == credential.name)
            {
                let (first, offset) = origins[earlier];
                return Err(layer.map.error(
                    span.clone(),
                    format!(
                        "credential {:?} is already defined at {}:{}; names must be unique across `extends` layers (rename one, or drop this one to use the base's)",
                        credential.name,
                        first.name(),
                        first.line(offset)
                    ),
                ));
            }
            origins.push((&layer.map, span.start));
            merged.credentials.push(credential.clone());
            // Spans are per file: the merged policy is never linted itself.
            merged.credential_spans.push(span.clone());
        }
    }
    Ok(merged)
}

/// The top file's own `default`, else the nearest base's, else deny.
fn default_of(layers: &[Layer]) -> DefaultAction {
    let Some(top) = layers.len().checked_sub(1) else {
        return DefaultAction::Deny;
    };
    let mut queue = VecDeque::from([top]);
    let mut seen = vec![false; layers.len()];
    while let Some(index) = queue.pop_front() {
        if std::mem::replace(&mut seen[index], true) {
            continue;
        }
        let layer = &layers[index];
        if layer.compiled.default_span.is_some() {
            return layer.compiled.default;
        }
        queue.extend(layer.extends.iter().copied());
    }
    DefaultAction::Deny
}

/// Every layer's own lints, then an error for each allow or ask rule that
/// a deny rule of one of its file's bases overrides in part or in whole.
pub(crate) fn lint(layers: &[Layer], whole: &Compiled) -> Vec<Lint> {
    let mut lints: Vec<Lint> = layers
        .iter()
        .flat_map(|layer| crate::lint::lint_layer(&layer.map, &layer.compiled, whole))
        .collect();
    for (index, layer) in layers.iter().enumerate() {
        for base in bases_of(layers, index) {
            let base = &layers[base];
            lints.extend(
                crate::lint::overridden(&base.compiled.deny, &layer.compiled)
                    .into_iter()
                    .map(|(span, message)| layer.map.lint_error(span, message)),
            );
        }
    }
    lints
}

/// Every file `index` extends, directly or not, each once.
fn bases_of(layers: &[Layer], index: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut queue: VecDeque<usize> = layers[index].extends.iter().copied().collect();
    while let Some(base) = queue.pop_front() {
        if !out.contains(&base) {
            out.push(base);
            queue.extend(layers[base].extends.iter().copied());
        }
    }
    out
}
