//! Reading a user's hwloc XML export whichever reader hwloc was built with.
//!
//! hwloc has two XML readers. The libxml2 one (a plugin: Debian's
//! `libhwloc-plugins`, often not installed) reads any well-formed document.
//! The built-in one reads only the exact shape `lstopo` writes: the XML
//! declaration and the DOCTYPE each on its own line, `<topology` at the
//! start of the next, attributes in double quotes, and no comments or
//! processing instructions anywhere. Exports that were annotated by hand,
//! re-indented by an editor or written by another tool fail there with
//! "errno 22" and nothing else.
//!
//! So numalab parses the document itself and hands hwloc the same elements,
//! attributes and text in the shape both readers accept. Nothing hwloc
//! reads is changed: element order, attribute order and values, and text
//! content (hwloc's userdata) are kept; comments, processing instructions
//! and the DOCTYPE's name are not read by hwloc and are dropped. hwloc 2.x
//! reads both its own (v2) and hwloc 1.x's format from this shape.

use std::fmt::Write as _;
use std::path::Path;

/// The largest XML file read: a 64-node machine with its PCI devices and
/// memory attributes exports a few MiB, so anything far bigger is not an
/// hwloc export (or is `/dev/zero`).
pub(crate) const MAX_XML_BYTES: u64 = 64 << 20;

/// Reads `path`, at most [`MAX_XML_BYTES`], as UTF-8 text.
pub(crate) fn read_bounded(path: &Path) -> Result<String, String> {
    crate::files::read_text_limited(path, MAX_XML_BYTES, "hwloc XML exports")
        .map_err(|e| e.to_string())
}

/// The sets hwloc's writer gives every object that has any: hwloc 2.9's
/// reader crashes on an object with some and not all of them.
const OBJECT_SETS: [&str; 4] = ["cpuset", "complete_cpuset", "nodeset", "complete_nodeset"];

/// Rewrites a well-formed hwloc XML document in the shape hwloc's built-in
/// reader accepts. Errors name the line and column of malformed XML, or say
/// that the document is not an hwloc topology, or name an object hwloc's
/// reader would crash on.
pub(crate) fn canonical(text: &str) -> Result<String, String> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, options)
        .map_err(|e| format!("not well-formed XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(format!(
            "not an hwloc topology: the document's element is <{}>, not <topology> \
             (export one with `lstopo --of xml FILE`)",
            root.tag_name().name()
        ));
    }
    check_objects(&doc)?;
    // hwloc 2.x writes `<topology version="2.0">` and names hwloc2.dtd;
    // hwloc 1.x writes a bare `<topology>` and hwloc.dtd.
    let dtd = if root.has_attribute("version") {
        "hwloc2.dtd"
    } else {
        "hwloc.dtd"
    };
    let mut out = String::with_capacity(text.len());
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, "<!DOCTYPE topology SYSTEM \"{dtd}\">");
    element(&mut out, root, 0);
    Ok(out)
}

/// Refuses what hwloc's XML reader does not check and crashes on: an
/// `<object>` with some of its four sets (cpuset, complete_cpuset, nodeset,
/// complete_nodeset) but not all. hwloc's own reader refuses it only in
/// sources newer than Debian 12's hwloc 2.9.
fn check_objects(doc: &roxmltree::Document<'_>) -> Result<(), String> {
    for object in doc.descendants().filter(|n| n.has_tag_name("object")) {
        let (present, missing): (Vec<&str>, Vec<&str>) = OBJECT_SETS
            .iter()
            .partition(|set| object.has_attribute(**set));
        if !present.is_empty() && !missing.is_empty() {
            let at = doc.text_pos_at(object.range().start);
            return Err(format!(
                "line {}: <object type=\"{}\"> has {} but not {}; \
                 hwloc writes all four sets of an object that has any",
                at.row,
                object.attribute("type").unwrap_or(""),
                present.join(", "),
                missing.join(", ")
            ));
        }
    }
    Ok(())
}

fn element(out: &mut String, node: roxmltree::Node<'_, '_>, depth: usize) {
    indent(out, depth);
    out.push('<');
    out.push_str(node.tag_name().name());
    for attr in node.attributes() {
        out.push(' ');
        out.push_str(attr.name());
        out.push_str("=\"");
        escape(out, attr.value());
        out.push('"');
    }
    let children: Vec<_> = node.children().filter(|c| c.is_element()).collect();
    // Text that is not only indentation is content (hwloc's userdata).
    let text: String = node
        .children()
        .filter(|c| c.is_text())
        .filter_map(|c| c.text())
        .collect();
    let has_text = !text.trim().is_empty();
    if children.is_empty() && !has_text {
        out.push_str("/>\n");
        return;
    }
    out.push('>');
    if has_text {
        escape(out, &text);
    } else {
        out.push('\n');
    }
    for child in &children {
        element(out, *child, depth + 1);
    }
    if !has_text {
        indent(out, depth);
    }
    out.push_str("</");
    out.push_str(node.tag_name().name());
    out.push_str(">\n");
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// Escapes as hwloc's own writer does, so its reader restores every byte.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANNOTATED: &str = r#"<?xml version='1.0'?>

<!-- written by hand -->
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version='2.0'>
  <!-- the machine -->
  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
          allowed_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001"
          allowed_nodeset="0x00000001" gp_index="1">
    <info name="HostName" value="a &quot;quoted&quot; &amp; odd&#10;name"/>
    <?ignored processing instruction?>
  </object>
</topology>
"#;

    #[test]
    fn comments_quotes_and_layout_are_normalised() {
        let out = canonical(ANNOTATED).unwrap();
        assert!(out.starts_with(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n"
        ));
        assert!(!out.contains("<!--") && !out.contains("<?ignored"));
        assert!(out.contains(
            "<info name=\"HostName\" value=\"a &quot;quoted&quot; &amp; odd&#10;name\"/>"
        ));
        assert!(out.contains("allowed_nodeset=\"0x00000001\" gp_index=\"1\">"));
    }

    #[test]
    fn userdata_text_is_kept_exactly() {
        let xml = "<topology version=\"2.0\"><object type=\"Machine\">\
                   <userdata name=\"x\" length=\"5\">a&lt;b c</userdata></object></topology>";
        let out = canonical(xml).unwrap();
        assert!(out.contains("<userdata name=\"x\" length=\"5\">a&lt;b c</userdata>\n"));
    }

    #[test]
    fn hwloc1_documents_keep_their_dtd() {
        let out = canonical("<topology><object type=\"Machine\"/></topology>").unwrap();
        assert!(out.contains("SYSTEM \"hwloc.dtd\""), "{out}");
    }

    #[test]
    fn an_object_with_only_some_of_its_sets_is_refused_before_hwloc_reads_it() {
        // Found by fuzzing (fuzz/regressions/hwloc_xml/): hwloc 2.9's
        // reader segfaults on it.
        let err = canonical("<topology><object type=\"NU\" cpuset=\"\"></object></topology>")
            .unwrap_err();
        assert_eq!(
            err,
            "line 1: <object type=\"NU\"> has cpuset but not complete_cpuset, nodeset, \
             complete_nodeset; hwloc writes all four sets of an object that has any"
        );
        let err = canonical(
            "<topology version=\"2.0\">\n<object type=\"Machine\" cpuset=\"0x1\" \
             complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\">\n\
             <object type=\"Group\" cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\"/>\n\
             </object></topology>",
        )
        .unwrap_err();
        assert!(err.starts_with("line 3: <object type=\"Group\"> has cpuset, nodeset, complete_nodeset but not complete_cpuset;"), "{err}");
        // Objects without sets (I/O devices, Misc) stay as they are.
        assert!(canonical("<topology><object type=\"Machine\"/></topology>").is_ok());
    }

    #[test]
    fn other_documents_are_named() {
        let err = canonical("<html><body/></html>").unwrap_err();
        assert!(err.contains("<html>") && err.contains("lstopo"), "{err}");
        let err = canonical("<topology><object></topology>").unwrap_err();
        assert!(
            err.contains("not well-formed XML") && err.contains("1:"),
            "{err}"
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// An element: name, attributes, text, children.
        #[derive(Debug, Clone)]
        struct Element(String, Vec<(String, String)>, String, Vec<Element>);

        fn element() -> impl Strategy<Value = Element> {
            let name = "[a-z_]{1,6}";
            let attrs = proptest::collection::vec((name, any::<String>()), 0..3);
            let leaf = (name, attrs.clone(), "[ a-z<>&\"\n\t]{0,8}")
                .prop_map(|(n, a, t)| Element(n, a, t, Vec::new()));
            leaf.prop_recursive(4, 24, 4, move |inner| {
                (name, attrs.clone(), proptest::collection::vec(inner, 0..4))
                    .prop_map(|(n, a, c)| Element(n, a, String::new(), c))
            })
        }

        /// XML of `e` with every character escaped as XML requires (and
        /// characters XML cannot carry left out).
        fn write(e: &Element, out: &mut String) {
            let clean = |s: &str| -> String {
                s.chars()
                    .filter(|c| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..))
                    .collect()
            };
            out.push('<');
            out.push_str(&e.0);
            let mut seen = Vec::new();
            for (k, v) in &e.1 {
                if seen.contains(k) {
                    continue;
                }
                seen.push(k.clone());
                out.push(' ');
                out.push_str(k);
                out.push_str("=\"");
                escape(out, &clean(v));
                out.push('"');
            }
            out.push('>');
            escape(out, &clean(&e.2));
            for c in &e.3 {
                write(c, out);
            }
            out.push_str("</");
            out.push_str(&e.0);
            out.push('>');
        }

        /// An element's name, attributes and non-blank text.
        type Shape = (String, Vec<(String, String)>, String);

        /// Elements with their attributes and non-blank text, in order.
        fn shape(text: &str) -> Vec<Shape> {
            let doc = roxmltree::Document::parse_with_options(
                text,
                roxmltree::ParsingOptions {
                    allow_dtd: true,
                    ..Default::default()
                },
            )
            .unwrap();
            doc.descendants()
                .filter(|n| n.is_element())
                .map(|n| {
                    let text: String = n
                        .children()
                        .filter_map(|c| c.is_text().then(|| c.text()).flatten())
                        .collect();
                    (
                        n.tag_name().name().to_owned(),
                        n.attributes()
                            .map(|a| (a.name().to_owned(), a.value().to_owned()))
                            .collect(),
                        if text.trim().is_empty() {
                            String::new()
                        } else {
                            text
                        },
                    )
                })
                .collect()
        }

        proptest! {
            /// The rewrite keeps every element, attribute value and text
            /// hwloc reads, and rewriting its own output changes nothing.
            #[test]
            fn the_rewrite_keeps_what_hwloc_reads_and_is_stable(children in proptest::collection::vec(element(), 0..4)) {
                let mut xml = String::from("<!-- a comment --><topology version=\"2.0\">");
                for c in &children {
                    write(c, &mut xml);
                }
                xml.push_str("</topology>");
                let once = canonical(&xml).unwrap();
                prop_assert_eq!(shape(&once), shape(&xml));
                prop_assert_eq!(canonical(&once).unwrap(), once);
            }

            /// Any text at all is rewritten or refused, never a panic.
            #[test]
            fn any_text_is_rewritten_or_refused(text in any::<String>()) {
                let _ = canonical(&text);
            }
        }
    }
}
