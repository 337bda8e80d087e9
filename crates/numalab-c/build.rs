//! libnumalab's soname carries the library's major version (0 until 1.0):
//! a program linked against libnumalab.so.0 keeps working with any 0.x.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnumalab.so.0");
}
