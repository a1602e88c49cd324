//! The `loaded` mode's bindings, step 1: bindgen's output for one header set read back with
//! `syn`: its functions (name, symbol, parameters), its types (structs, unions, aliases, for
//! comparison without their attributes), its enum values and constants. build/compare.rs
//! compares two sets; build/dispatch.rs writes the code.

use anyhow::{bail, Context, Result};
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use syn::{Fields, ForeignItem, ImplItem, Item, Type};

/// One header set: its major, bindgen's output, and the folder holding `libcudart.so.<major>`
/// at build time (the run-time search looks there too), if any.
pub struct HeaderSet {
    /// 13 or 12.
    pub major: u32,
    /// bindgen's output over wrapper.h with these headers.
    pub text: String,
    /// The folder of `libcudart.so.<major>` the build found, if any.
    pub lib_dir: Option<String>,
}

/// The driver function the loader asks before it loads a runtime (declared from `cuda.h`).
pub const DRIVER_VERSION: &str = "cuDriverGetVersion";
/// The runtime function the loader calls to check a library it opened.
pub const RUNTIME_VERSION: &str = "cudaRuntimeGetVersion";

/// A function declared in a header set.
#[derive(Clone, Debug)]
pub struct Function {
    /// The Rust name (the plain name of a `#define cudaX cudaX_vN` rename).
    pub rust: String,
    /// The symbol.
    pub link: String,
    /// (name, type) of each parameter.
    pub params: Vec<(String, Type)>,
    /// The return type; None for `void`.
    pub ret: Option<Type>,
}

/// What one set declares.
pub struct Set {
    pub major: u32,
    pub functions: BTreeMap<String, Function>,
    /// Structs, unions and aliases by name, attributes removed (for comparison).
    pub types: HashMap<String, Item>,
    /// `impl T { pub const C: T = ...; }`: (T, C) -> the value's tokens.
    pub enum_values: HashMap<(String, String), String>,
    /// Top-level `pub const C: T = v;`: C -> tokens of `T = v`.
    pub consts: BTreeMap<String, String>,
    /// Every item but the functions, as bindgen wrote them.
    pub items: Vec<Item>,
}

/// Reads one header set's bindings.
pub fn parse_set(set: &HeaderSet) -> Result<Set> {
    let file = syn::parse_file(&set.text).with_context(|| {
        format!(
            "llaisys-nvidia: bindgen's output for the CUDA {} headers does not parse as Rust",
            set.major
        )
    })?;
    let mut out = Set {
        major: set.major,
        functions: BTreeMap::new(),
        types: HashMap::new(),
        enum_values: HashMap::new(),
        consts: BTreeMap::new(),
        items: Vec::new(),
    };
    for item in file.items {
        match &item {
            Item::ForeignMod(m) => {
                for f in &m.items {
                    if let ForeignItem::Fn(f) = f {
                        let func = function(f)?;
                        out.functions.insert(func.rust.clone(), func);
                    }
                }
                continue;
            }
            Item::Struct(s) => {
                out.types.insert(s.ident.to_string(), without_attrs(&item));
            }
            Item::Union(u) => {
                out.types.insert(u.ident.to_string(), without_attrs(&item));
            }
            Item::Type(t) => {
                out.types.insert(t.ident.to_string(), without_attrs(&item));
            }
            // `pub use self::cudaError as cudaError_t;`: bindgen's alias of a newtype enum.
            Item::Use(u) => {
                if let syn::UseTree::Path(p) = &u.tree {
                    if let syn::UseTree::Rename(r) = &*p.tree {
                        let mut plain = u.clone();
                        plain.attrs.clear();
                        out.types.insert(r.rename.to_string(), Item::Use(plain));
                    }
                }
            }
            Item::Impl(i) if i.trait_.is_none() => {
                let owner = tokens(&i.self_ty);
                for c in &i.items {
                    if let ImplItem::Const(c) = c {
                        out.enum_values
                            .insert((owner.clone(), c.ident.to_string()), tokens(&c.expr));
                    }
                }
            }
            Item::Const(c) if c.ident != "_" => {
                out.consts.insert(
                    c.ident.to_string(),
                    format!("{} = {}", tokens(&c.ty), tokens(&c.expr)),
                );
            }
            _ => {}
        }
        out.items.push(item);
    }
    Ok(out)
}

fn function(f: &syn::ForeignItemFn) -> Result<Function> {
    let rust = f.sig.ident.to_string();
    let mut link = rust.clone();
    for a in &f.attrs {
        if a.path().is_ident("link_name") {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    link = s.value().trim_start_matches('\u{1}').to_string();
                }
            }
        }
    }
    if f.sig.variadic.is_some() {
        bail!("llaisys-nvidia: {rust} is variadic; the loaded mode's dispatch cannot forward it");
    }
    let mut params = Vec::new();
    for (i, input) in f.sig.inputs.iter().enumerate() {
        let syn::FnArg::Typed(pt) = input else {
            bail!("llaisys-nvidia: {rust} has a receiver in bindgen's output");
        };
        let name = match &*pt.pat {
            syn::Pat::Ident(id) => id.ident.to_string(),
            _ => format!("arg{}", i + 1),
        };
        params.push((name, (*pt.ty).clone()));
    }
    let ret = match &f.sig.output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, t) => Some((**t).clone()),
    };
    Ok(Function {
        rust,
        link,
        params,
        ret,
    })
}

pub fn tokens<T: ToTokens>(t: &T) -> String {
    t.to_token_stream().to_string()
}

/// The item with its attributes (docs, derives, repr) and its fields' attributes removed.
pub fn without_attrs(item: &Item) -> Item {
    let mut item = item.clone();
    let strip_fields = |fields: &mut Fields| {
        for f in fields.iter_mut() {
            f.attrs.clear();
        }
    };
    match &mut item {
        Item::Struct(s) => {
            s.attrs.clear();
            strip_fields(&mut s.fields);
        }
        Item::Union(u) => {
            u.attrs.clear();
            for f in u.fields.named.iter_mut() {
                f.attrs.clear();
            }
        }
        Item::Type(t) => t.attrs.clear(),
        _ => {}
    }
    item
}

/// Every identifier in `t` that names a type of either set (`t` holds no string literal: its
/// attributes are removed, see [`without_attrs`]).
pub fn named_types<T: ToTokens>(t: &T, a: &Set, b: &Set) -> BTreeSet<String> {
    tokens(t)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|i| a.types.contains_key(*i) || b.types.contains_key(*i))
        .map(str::to_string)
        .collect()
}
