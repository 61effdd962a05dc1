//! The crate's public surface, rendered from its sources and checked against `core/api.txt`,
//! so that a change to the API shows in review as a change to that file. After a deliberate
//! change: `SPEECHSTREAM_UPDATE_API=1 cargo test -p speechstream-core --test public_api`.
//!
//! Read from the sources (with syn) rather than from rustdoc's JSON, which needs a nightly
//! toolchain. It lists what a user can name: public modules, items, fields, variants, inherent
//! methods and trait impls (derives included), skipping `#[doc(hidden)]`.

use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Fields, ImplItem, Item, TraitItem, Visibility};

fn is_public(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn is_hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("doc") && a.to_token_stream().to_string().contains("hidden"))
}

/// `#[cfg(...)]`, `#[derive(...)]` and `#[non_exhaustive]`: each changes what a user can rely on.
fn notes(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("derive") || a.path().is_ident("non_exhaustive"))
        .map(|a| tidy(&a.to_token_stream().to_string()) + " ")
        .collect()
}

/// `#[must_use]` on a function: ignoring its result becomes a warning in the caller's code.
fn must_use(attrs: &[Attribute]) -> &'static str {
    if attrs.iter().any(|a| a.path().is_ident("must_use")) {
        "#[must_use] "
    } else {
        ""
    }
}

/// Token streams print with a space between every token; close the usual gaps.
fn tidy(tokens: &str) -> String {
    let mut s = tokens.to_owned();
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" ::", "::"),
        (" : ", ": "),
        (" ,", ","),
        ("< ", "<"),
        (" >", ">"),
        (" <", "<"),
        ("& ", "&"),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
        ("# [", "#["),
        (" ;", ";"),
        ("- >", "->"),
        ("' ", "'"),
        (",)", ")"),
        ("(mut ", "("),
        (", mut ", ", "),
        ("->(", "-> ("),
    ] {
        s = s.replace(from, to);
    }
    s
}

/// An item's tokens without its attributes (its docs).
fn bare<T: Clone + ToTokens>(item: &T, attrs: impl Fn(&mut T) -> &mut Vec<Attribute>) -> String {
    let mut item = item.clone();
    attrs(&mut item).clear();
    tidy(&item.to_token_stream().to_string())
}

fn render(module: &str, items: &[Item], dir: &Path, out: &mut Vec<String>) {
    // Impls of the module's private types are not API.
    let private: Vec<String> = items
        .iter()
        .filter_map(|item| match item {
            Item::Struct(s) if !is_public(&s.vis) => Some(s.ident.to_string()),
            Item::Enum(e) if !is_public(&e.vis) => Some(e.ident.to_string()),
            _ => None,
        })
        .collect();
    for item in items {
        let mut line = |text: String| out.push(format!("{module}: {text}"));
        match item {
            Item::Mod(m) if is_public(&m.vis) && !is_hidden(&m.attrs) => {
                line(format!("{}pub mod {}", notes(&m.attrs), m.ident));
                let name = m.ident.to_string();
                if let Some((_, inline)) = &m.content {
                    render(&format!("{module}::{name}"), inline, &dir.join(&name), out);
                } else {
                    // `name.rs` beside its folder of submodules, or `name/mod.rs` inside it.
                    let (file, sub) = (dir.join(format!("{name}.rs")), dir.join(&name));
                    let file = if file.exists() { file } else { sub.join("mod.rs") };
                    let source = std::fs::read_to_string(&file).expect("module source");
                    let parsed = syn::parse_file(&source).expect("module parses");
                    render(&format!("{module}::{name}"), &parsed.items, &sub, out);
                }
            }
            Item::Use(u) if is_public(&u.vis) => line(bare(u, |u| &mut u.attrs)),
            Item::Const(c) if is_public(&c.vis) && !is_hidden(&c.attrs) => line(bare(c, |c| &mut c.attrs)),
            Item::Fn(f) if is_public(&f.vis) && !is_hidden(&f.attrs) => {
                line(format!("{}pub {}", must_use(&f.attrs), tidy(&f.sig.to_token_stream().to_string())))
            }
            Item::Type(t) if is_public(&t.vis) => line(bare(t, |t| &mut t.attrs)),
            Item::Struct(s) if is_public(&s.vis) && !is_hidden(&s.attrs) => {
                let generics = tidy(&s.generics.to_token_stream().to_string());
                line(format!("{}pub struct {}{generics}", notes(&s.attrs), s.ident));
                for (index, field) in s.fields.iter().enumerate().filter(|(_, f)| is_public(&f.vis)) {
                    let name = field.ident.as_ref().map_or(index.to_string(), ToString::to_string);
                    let ty = tidy(&field.ty.to_token_stream().to_string());
                    line(format!("  {}.{name}: {ty}", s.ident));
                }
            }
            Item::Enum(e) if is_public(&e.vis) && !is_hidden(&e.attrs) => {
                line(format!(
                    "{}pub enum {}{}",
                    notes(&e.attrs),
                    e.ident,
                    tidy(&e.generics.to_token_stream().to_string())
                ));
                for variant in &e.variants {
                    let fields = match &variant.fields {
                        Fields::Unit => String::new(),
                        Fields::Unnamed(fields) => tidy(&fields.to_token_stream().to_string()),
                        Fields::Named(fields) => {
                            let named: Vec<String> = fields
                                .named
                                .iter()
                                .filter_map(|f| {
                                    Some(format!(
                                        "{}: {}",
                                        f.ident.as_ref()?,
                                        tidy(&f.ty.to_token_stream().to_string())
                                    ))
                                })
                                .collect();
                            format!(" {{ {} }}", named.join(", "))
                        }
                    };
                    line(format!("  {}::{}{fields}", e.ident, variant.ident));
                }
            }
            Item::Trait(t) if is_public(&t.vis) && !is_hidden(&t.attrs) => {
                let bounds = tidy(&t.supertraits.to_token_stream().to_string());
                line(format!("pub trait {}: {bounds}", t.ident));
                for method in &t.items {
                    if let TraitItem::Fn(f) = method {
                        let provided = if f.default.is_some() { " (provided)" } else { "" };
                        line(format!("  {}: {}{provided}", t.ident, tidy(&f.sig.to_token_stream().to_string())));
                    }
                }
            }
            Item::Impl(i) => {
                let ty = tidy(&i.self_ty.to_token_stream().to_string());
                if private.contains(&ty) {
                    continue;
                }
                let generics = tidy(&i.generics.to_token_stream().to_string());
                if let Some((_, path, _)) = &i.trait_ {
                    line(format!("impl{generics} {} for {ty}", tidy(&path.to_token_stream().to_string())));
                    continue;
                }
                for member in &i.items {
                    if let ImplItem::Fn(f) = member {
                        if is_public(&f.vis) && !is_hidden(&f.attrs) {
                            let sig = tidy(&f.sig.to_token_stream().to_string());
                            line(format!("impl{generics} {ty}: {}pub {sig}", must_use(&f.attrs)));
                        }
                    }
                    if let ImplItem::Const(c) = member {
                        if is_public(&c.vis) {
                            line(format!("impl{generics} {ty}: {}", bare(c, |c| &mut c.attrs)));
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

#[test]
fn public_api_matches_api_txt() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs");
    let mut lines = Vec::new();
    render("speechstream_core", &syn::parse_file(&source).expect("lib.rs parses").items, &root.join("src"), &mut lines);
    let rendered = lines.join("\n") + "\n";
    let listing = root.join("api.txt");
    if std::env::var_os("SPEECHSTREAM_UPDATE_API").is_some() {
        std::fs::write(&listing, &rendered).expect("api.txt written");
        return;
    }
    let checked_in = std::fs::read_to_string(&listing).unwrap_or_default();
    let changed: Vec<String> = diff(&checked_in, &rendered);
    assert!(
        changed.is_empty(),
        "the public API differs from core/api.txt:\n{}\nIf that is intended: SPEECHSTREAM_UPDATE_API=1 cargo test -p speechstream-core --test public_api",
        changed.join("\n")
    );
}

/// Lines only in `old` (`-`) or only in `new` (`+`): enough to see what changed.
fn diff(old: &str, new: &str) -> Vec<String> {
    let (old_lines, new_lines): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let removed = old_lines.iter().filter(|l| !new_lines.contains(l)).map(|l| format!("- {l}"));
    let added = new_lines.iter().filter(|l| !old_lines.contains(l)).map(|l| format!("+ {l}"));
    let mut changed: Vec<String> = removed.chain(added).collect();
    if changed.is_empty() && old != new {
        changed.push("(the same lines, in another order)".to_owned());
    }
    changed
}
