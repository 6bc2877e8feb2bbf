//! Demangling of Rust (legacy and v0) and C++ (Itanium) symbol names.

/// Demangle a Rust or C++ symbol name; other names come back unchanged.
///
/// Rust names lose their hash suffix (`crate::module::function`, not `...::h0123abcd`). C++ names keep their
/// parameter list, as `perf` shows them (`ns::Klass::method()`).
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = symbol.demangle() {
                return s;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    /// Check that Rust legacy and v0, C++ and plain C names demangle as expected.
    #[test]
    fn demangles_rust_cpp_and_c() {
        assert_eq!(
            demangle("_ZN4test6module8function17h0123456789abcdefE"),
            "test::module::function"
        );
        assert_eq!(
            demangle("_RNvNtCs1234_4test6module8function"),
            "test::module::function"
        );
        assert_eq!(demangle("_ZN2ns5Klass6methodEv"), "ns::Klass::method()");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot_valid"), "_Znot_valid");
    }
}
