//! The `loaded` mode's bindings, step 2: what a function of the primary header set calls when a
//! runtime of the other major is loaded (build/dispatch.rs has the rules in words): the same
//! declaration there (under its name or a versioned one of the same base name), the same name
//! through structures converted field by field, or nothing.

use crate::headers::{named_types, tokens, Function, Set};
use std::collections::HashSet;
use syn::{Fields, Item, Type};

/// The comparison of the primary set `p` with another set `o`.
pub struct Compare<'a> {
    pub p: &'a Set,
    pub o: &'a Set,
    /// The types defined alike in both sets, down to every type they name (the largest such
    /// set: types that only reach each other in a loop stay in it).
    pub alike: HashSet<String>,
}

impl<'a> Compare<'a> {
    pub fn new(p: &'a Set, o: &'a Set) -> Compare<'a> {
        let mut alike: HashSet<String> = p
            .types
            .iter()
            .filter(|(name, def)| {
                o.types
                    .get(*name)
                    .is_some_and(|other| tokens(*def) == tokens(other))
                    && values_agree(p, o, name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        loop {
            let before = alike.len();
            let keep: HashSet<String> = alike
                .iter()
                .filter(|n| {
                    named_types(&p.types[*n], p, o)
                        .iter()
                        .all(|r| alike.contains(r))
                })
                .cloned()
                .collect();
            alike = keep;
            if alike.len() == before {
                break;
            }
        }
        Compare { p, o, alike }
    }

    /// `t` (written in the primary set) means the same in both sets.
    pub fn type_alike(&self, t: &Type) -> bool {
        named_types(t, self.p, self.o)
            .iter()
            .all(|n| self.alike.contains(n))
    }

    /// The two declarations are the same: types token for token, each type alike.
    pub fn same_signature(&self, f: &Function, g: &Function) -> bool {
        f.params.len() == g.params.len()
            && f.params
                .iter()
                .zip(&g.params)
                .all(|((_, a), (_, b))| tokens(a) == tokens(b) && self.type_alike(a))
            && match (&f.ret, &g.ret) {
                (None, None) => true,
                (Some(a), Some(b)) => tokens(a) == tokens(b) && self.type_alike(a),
                _ => false,
            }
    }

    /// How to convert struct `name` from set `from` to set `to` field by field: for each field
    /// of the destination, copy or convert (nested struct); None when a field of both sets
    /// differs in a way that does not convert.
    pub fn conversion(
        &self,
        name: &str,
        to_primary: bool,
        seen: &mut Vec<String>,
    ) -> Option<Vec<FieldStep>> {
        let (from, to) = if to_primary {
            (self.o, self.p)
        } else {
            (self.p, self.o)
        };
        let (Some(Item::Struct(src)), Some(Item::Struct(dst))) =
            (from.types.get(name), to.types.get(name))
        else {
            return None;
        };
        if seen.iter().any(|s| s == name) {
            return None;
        }
        seen.push(name.to_string());
        let (Fields::Named(src_f), Fields::Named(dst_f)) = (&src.fields, &dst.fields) else {
            return None;
        };
        let mut steps = Vec::new();
        for d in &dst_f.named {
            let field = d.ident.as_ref()?.to_string();
            let Some(s) = src_f
                .named
                .iter()
                .find(|s| s.ident.as_ref().is_some_and(|i| *i == field))
            else {
                continue;
            };
            if field.starts_with("reserved") && tokens(&s.ty) != tokens(&d.ty) {
                // Padding for later fields, sized differently by each major: left zero.
                continue;
            }
            if tokens(&s.ty) == tokens(&d.ty) && self.type_alike(&d.ty) {
                let plain = named_types(&d.ty, self.p, self.o).is_empty();
                steps.push(FieldStep::Copy(field, plain));
            } else if let (Some(a), Some(b)) = (struct_name(&s.ty), struct_name(&d.ty)) {
                if a != b {
                    return None;
                }
                self.conversion(&a, to_primary, seen)?;
                steps.push(FieldStep::Convert(field, a));
            } else {
                return None;
            }
        }
        seen.pop();
        Some(steps)
    }

    /// Whether struct `name` converts both ways.
    pub fn convertible(&self, name: &str) -> bool {
        self.conversion(name, true, &mut Vec::new()).is_some()
            && self.conversion(name, false, &mut Vec::new()).is_some()
    }

    /// The call of the other set's `g` for the primary set's `f` through converted copies: one
    /// `ArgStep` per parameter; None when some parameter neither is alike nor converts.
    pub fn converted_call(&self, f: &Function, g: &Function) -> Option<Vec<ArgStep>> {
        if f.params.len() != g.params.len() {
            return None;
        }
        match (&f.ret, &g.ret) {
            (Some(a), Some(b)) if tokens(a) == tokens(b) && self.type_alike(a) => {}
            _ => return None,
        }
        let mut steps = Vec::new();
        for ((_, a), (_, b)) in f.params.iter().zip(&g.params) {
            if tokens(a) == tokens(b) && self.type_alike(a) {
                steps.push(ArgStep::Same);
                continue;
            }
            if tokens(a) != tokens(b) {
                return None;
            }
            let step = match a {
                Type::Ptr(p) => {
                    let name = struct_name(&p.elem)?;
                    if p.mutability.is_some() {
                        ArgStep::InOut(name)
                    } else {
                        ArgStep::In(name)
                    }
                }
                t => ArgStep::Value(struct_name(t)?),
            };
            let name = match &step {
                ArgStep::InOut(n) | ArgStep::In(n) | ArgStep::Value(n) => n,
                ArgStep::Same => unreachable!("handled above"),
            };
            if !self.convertible(name) {
                return None;
            }
            steps.push(step);
        }
        steps
            .iter()
            .any(|s| !matches!(s, ArgStep::Same))
            .then_some(steps)
    }
}

/// The enum values named alike in both sets agree (values only one set has are fine: the
/// runtime of the other answers cudaErrorInvalidValue for them). A `...Max` value marks the end
/// of an enumeration (`cudaDevAttrMax` grows with each release), not a value to pass.
fn values_agree(p: &Set, o: &Set, ty: &str) -> bool {
    p.enum_values
        .iter()
        .filter(|((owner, name), _)| owner == ty && !name.ends_with("Max"))
        .all(|(k, v)| o.enum_values.get(k).is_none_or(|w| w == v))
}

/// The name of a plain path type (`cudaDeviceProp`), if it is one.
fn struct_name(t: &Type) -> Option<String> {
    match t {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            Some(p.path.segments[0].ident.to_string())
        }
        _ => None,
    }
}

/// One field of a conversion.
#[derive(Clone, Debug)]
pub enum FieldStep {
    /// (field, whether its type names no type of the sets: a plain assignment then; else the
    /// two sets' types differ in name only and the value is copied bit for bit)
    Copy(String, bool),
    /// (field, struct type)
    Convert(String, String),
}

/// One parameter of a converted call.
#[derive(Clone, Debug)]
pub enum ArgStep {
    /// Passed as is.
    Same,
    /// A struct by value, converted.
    Value(String),
    /// `*const T`: a converted copy.
    In(String),
    /// `*mut T`: a converted copy, converted back after the call.
    InOut(String),
}

/// What a function of the primary set calls when the runtime of one major is loaded.
#[derive(Clone, Debug)]
pub enum Plan {
    /// This symbol, with the primary declaration.
    Direct(String),
    /// This symbol, with converted copies.
    Converted(String, Vec<ArgStep>),
    /// Not callable with this major, and why.
    Absent(String),
}

/// `name` without a trailing `_vN`.
fn base_name(name: &str) -> &str {
    if let Some((base, v)) = name.rsplit_once("_v") {
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            return base;
        }
    }
    name
}

/// The version suffix of `name` (`_v3` -> 3, none -> 0).
fn version_of(name: &str) -> u32 {
    name.rsplit_once("_v")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// What the primary set's `f` calls with the other set's runtime.
pub fn plan(cmp: &Compare, f: &Function) -> Plan {
    let base = base_name(&f.rust);
    let mut candidates: Vec<&Function> = cmp
        .o
        .functions
        .values()
        .filter(|g| base_name(&g.rust) == base)
        .collect();
    // This very name first, then the newest version.
    candidates.sort_by_key(|g| (g.rust != f.rust, std::cmp::Reverse(version_of(&g.rust))));
    if let Some(g) = candidates.iter().find(|g| cmp.same_signature(f, g)) {
        return Plan::Direct(g.link.clone());
    }
    if let Some(g) = candidates.iter().find(|g| g.rust == f.rust) {
        if let Some(steps) = cmp.converted_call(f, g) {
            return Plan::Converted(g.link.clone(), steps);
        }
        return Plan::Absent(format!(
            "its CUDA {} declaration ({}) differs from the CUDA {} one in a way that does not \
             convert",
            cmp.o.major, g.link, cmp.p.major
        ));
    }
    Plan::Absent(format!(
        "the CUDA {} headers declare no {}",
        cmp.o.major, f.rust
    ))
}
