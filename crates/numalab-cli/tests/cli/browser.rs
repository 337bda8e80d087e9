//! numalab's HTML pages in a real browser: headless Chromium driven over
//! the Chrome DevTools Protocol (CDP).
//!
//! The client is small and std only. Chromium's `--remote-debugging-pipe`
//! reads CDP messages (JSON, each ended by a NUL byte) from its fd 3 and
//! writes its answers and events to fd 4. `Command` only places fds 0–2, so
//! Chromium is started through `sh`, which moves the two pipes from 0 and 1
//! to 3 and 4 before `exec`: no `libc`, no `unsafe`, no websocket.
//!
//! Every wait is bounded ([`WAIT`]) and fails saying what it waited for;
//! every message read is bounded ([`MAX_MESSAGE`]). Chromium is ended and its
//! profile removed when the [`Browser`] drops, also when a test panics.
//! Screenshots are kept in `target/test-artefacts/browser/`.
//!
//! Without Chromium the tests print `skipped: …` and pass, except under
//! `CI=true`, where they fail (`scripts/setup.sh --test` installs it).

use crate::common::*;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// The longest any one wait may take: an answer, a page load.
const WAIT: Duration = Duration::from_secs(30);
/// The largest message read from Chromium (a full-page screenshot, base64).
const MAX_MESSAGE: u64 = 64 << 20;
/// The widths every page is checked at: a laptop and a phone.
const WIDTHS: [(u32, u32); 2] = [(1280, 800), (390, 844)];

/// A headless Chromium with one page (tab) attached.
pub(crate) struct Browser {
    child: Child,
    /// Messages for Chromium, NUL included, written by a thread of their
    /// own: a Chromium that stops reading blocks that thread, not the test,
    /// which waits for the answer a bounded time.
    to_chromium: Sender<Vec<u8>>,
    from_chromium: Receiver<Result<Value, String>>,
    /// The user-data directory, removed on drop; also holds `chromium.log`.
    profile: PathBuf,
    next_id: u64,
    /// The CDP session of the page every page command goes to.
    session: String,
    /// Console errors of the page since the last `load`.
    console_errors: Vec<String>,
    /// `Page.loadEventFired` events seen so far.
    loads: u64,
    /// The viewport's width and height, as last set by `load`.
    viewport: (u32, u32),
    /// Messages read while waiting for something else: none is lost.
    pending: VecDeque<Value>,
}

/// What one page showed at one viewport size.
#[derive(Debug)]
pub(crate) struct PageCheck {
    pub width: u32,
    pub height: u32,
    /// Uncaught exceptions, `console.error`/`console.assert` and the
    /// browser's own errors (a file not found, a refused script).
    pub console_errors: Vec<String>,
    /// Why the page scrolls sideways, if it does.
    pub overflow: Vec<String>,
    /// How many top-level `<svg>` elements the page has.
    pub svgs: usize,
    /// Those that are not drawn, and why.
    pub svg_problems: Vec<String>,
}

impl PageCheck {
    /// Everything wrong, one line each, naming the width.
    pub fn problems(&self) -> Vec<String> {
        let at = format!("at {} px", self.width);
        let errors = self
            .console_errors
            .iter()
            .map(|e| format!("{at}: console error: {e}"));
        let overflow = self.overflow.iter().map(|o| format!("{at}: overflow: {o}"));
        let svgs = self.svg_problems.iter().map(|s| format!("{at}: {s}"));
        errors.chain(overflow).chain(svgs).collect()
    }
}

/// What [`inspect_page`] found at every width.
#[derive(Debug)]
pub(crate) struct PageReport {
    pub checks: Vec<PageCheck>,
    /// The page's background differs between light and dark mode, at every width.
    pub dark_differs: bool,
    /// The background, light and dark, at each width.
    pub backgrounds: Vec<(String, String)>,
    /// The screenshots taken, light and dark, per width.
    pub screenshots: Vec<PathBuf>,
}

impl PageReport {
    pub fn problems(&self) -> Vec<String> {
        self.checks.iter().flat_map(PageCheck::problems).collect()
    }
}

/// Loads `path` at 1280 and 390 px wide, light and dark, keeps screenshots
/// `<name>-<width>.png` and `<name>-<width>-dark.png` in
/// `target/test-artefacts/browser/`, and fails listing every problem:
/// console errors, sideways overflow, figures not drawn. `None` (skipped)
/// where Chromium is not installed. Dark mode is not asserted here: assert
/// on [`PageReport::dark_differs`].
pub(crate) fn check_page(path: &Path, name: &str) -> Option<PageReport> {
    let report = inspect_page(path, name)?;
    let problems = report.problems();
    assert!(
        problems.is_empty(),
        "{} in a browser (screenshots in {}):\n  {}",
        path.display(),
        artefacts().display(),
        problems.join("\n  ")
    );
    Some(report)
}

/// [`check_page`] without the assertion: what a page does, for tests that
/// expect problems.
pub(crate) fn inspect_page(path: &Path, name: &str) -> Option<PageReport> {
    let mut browser = Browser::start()?;
    let dir = artefacts();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let mut report = PageReport {
        checks: Vec::new(),
        dark_differs: true,
        backgrounds: Vec::new(),
        screenshots: Vec::new(),
    };
    for (width, height) in WIDTHS {
        let check = browser.load(path, width, height);
        let light = dir.join(format!("{name}-{width}.png"));
        browser.screenshot(&light);
        browser.set_dark(true);
        let dark = dir.join(format!("{name}-{width}-dark.png"));
        browser.screenshot(&dark);
        browser.set_dark(false);
        let (light_background, dark_background) = browser.backgrounds();
        report.dark_differs &= light_background != dark_background;
        report.backgrounds.push((light_background, dark_background));
        report.checks.push(check);
        report.screenshots.extend([light, dark]);
    }
    Some(report)
}

/// `target/test-artefacts/browser/`: kept after the tests, for a person to look at.
pub(crate) fn artefacts() -> PathBuf {
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("test-artefacts/browser")
}

impl Browser {
    /// Starts headless Chromium with one blank page attached. `None`, having
    /// printed why, where Chromium is not installed; a panic instead under
    /// `CI=true`, and where it is installed but does not start.
    pub fn start() -> Option<Browser> {
        let Some(program) = find_chromium() else {
            let why = "chromium is not installed (scripts/setup.sh --test installs it)";
            numalab::testing::cannot_check(why);
            return None;
        };
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let profile = std::env::temp_dir().join(format!(
            "numalab-chromium-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let log = std::fs::File::create(profile.join("chromium.log")).unwrap();

        let (commands_read, commands_write) = std::io::pipe().unwrap();
        let (answers_read, answers_write) = std::io::pipe().unwrap();
        let mut args = vec![
            "--headless=new".to_owned(),
            "--remote-debugging-pipe".to_owned(),
            "--disable-gpu".to_owned(),
            "--no-first-run".to_owned(),
            "--no-default-browser-check".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            format!("--user-data-dir={}", profile.display()),
        ];
        if running_as_root() {
            // Chromium refuses to run as root inside its sandbox.
            args.push("--no-sandbox".to_owned());
        }
        args.push("about:blank".to_owned());
        let mut command = Command::new("sh");
        command
            // fd 0 (our commands) becomes fd 3 and fd 1 (its answers) fd 4,
            // then Chromium replaces the shell: its pid is the child's.
            .args(["-c", r#"exec 3<&0 4>&1 </dev/null 1>&2; exec "$0" "$@""#])
            .arg(&program)
            .args(&args)
            .stdin(commands_read)
            .stdout(answers_write)
            .stderr(log);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        // Our copies of Chromium's ends must close, so that its exit reads as
        // the end of the pipe.
        drop(command);

        let (to_chromium, commands) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut pipe = commands_write;
            // Ends when the Browser drops its sender, or Chromium its pipe.
            while let Ok(message) = commands.recv() {
                if pipe.write_all(&message).is_err() {
                    return;
                }
            }
        });
        let (sender, from_chromium) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(answers_read);
            loop {
                let mut message = Vec::new();
                let read = (&mut reader)
                    .take(MAX_MESSAGE + 1)
                    .read_until(0, &mut message);
                let parsed = match read {
                    Ok(0) => Err("chromium closed its end of the pipe".to_owned()),
                    Ok(_) if message.last() != Some(&0) && message.len() as u64 > MAX_MESSAGE => {
                        Err(format!(
                            "a message from chromium is over {MAX_MESSAGE} bytes"
                        ))
                    }
                    Ok(_) if message.last() != Some(&0) => {
                        Err("chromium closed the pipe inside a message".to_owned())
                    }
                    Ok(_) => serde_json::from_slice(&message[..message.len() - 1])
                        .map_err(|e| format!("chromium sent a message that is not JSON: {e}")),
                    Err(e) => Err(format!("reading from chromium: {e}")),
                };
                let end = parsed.is_err();
                if sender.send(parsed).is_err() || end {
                    return;
                }
            }
        });

        let mut browser = Browser {
            child,
            to_chromium,
            from_chromium,
            profile,
            next_id: 0,
            session: String::new(),
            console_errors: Vec::new(),
            loads: 0,
            viewport: (800, 600),
            pending: VecDeque::new(),
        };
        let target = browser.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].clone();
        let attached = browser.call_browser(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .expect("Target.attachToTarget answers a sessionId")
            .to_owned();
        for domain in ["Runtime", "Log", "Page"] {
            browser.call(&format!("{domain}.enable"), json!({}));
        }
        Some(browser)
    }

    /// Chromium's version, as `Browser.getVersion` reports it.
    pub fn version(&mut self) -> String {
        let version = self.call_browser("Browser.getVersion", json!({}));
        version["product"].as_str().unwrap_or("?").to_owned()
    }

    /// Opens `path` in a `width` × `height` viewport, waits for its load
    /// event and its first frame, and checks it: console errors, sideways
    /// overflow, `<svg>` figures drawn.
    pub fn load(&mut self, path: &Path, width: u32, height: u32) -> PageCheck {
        let path =
            std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let url = format!("file://{}", path.display());
        self.viewport = (width, height);
        self.set_viewport();
        self.set_dark(false);
        self.console_errors.clear();
        let loads = self.loads;
        let navigated = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = navigated["errorText"].as_str() {
            panic!("opening {url}: {error}");
        }
        self.wait_until(&format!("Page.loadEventFired for {url}"), |b| {
            b.loads > loads
        });
        let at = self.eval("location.href");
        assert_eq!(
            at.as_str(),
            Some(url.as_str()),
            "the page loaded is not the one asked for"
        );
        self.settle();

        let overflow = self.eval(OVERFLOW_JS);
        let overflow = overflow
            .as_array()
            .expect("the overflow check returns a list")
            .iter()
            .map(|o| o.as_str().unwrap_or_default().to_owned())
            .collect();
        let svgs = self.eval(SVGS_JS);
        let svgs = svgs.as_array().expect("the svg check returns a list");
        let svg_problems = svgs.iter().flat_map(svg_problems).collect();
        // Events read while checking (an error in a later frame) count too.
        self.drain();
        PageCheck {
            width,
            height,
            console_errors: self.console_errors.clone(),
            overflow,
            svgs: svgs.len(),
            svg_problems,
        }
    }

    /// Evaluates `js` in the page, awaiting it if it is a promise, and
    /// returns its value as JSON (`null` for `undefined`). Panics if it throws.
    pub fn eval(&mut self, js: &str) -> Value {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(details) = answer.get("exceptionDetails") {
            panic!("evaluating `{js}` threw: {}", exception_text(details));
        }
        answer["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Saves the whole page, beyond the viewport, as a PNG file.
    pub fn screenshot(&mut self, out: &Path) {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let data = shot["data"]
            .as_str()
            .expect("Page.captureScreenshot answers data");
        let png = base64_decode(data).expect("the screenshot is base64");
        std::fs::write(out, png).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
        // Capturing beyond the viewport grows the view to the whole page and
        // does not quite put it back: the vertical scrollbar stays away, the
        // page is laid out 15 px wider, until the override is cleared and
        // set again (setting the same values alone changes nothing).
        self.set_viewport();
    }

    fn set_viewport(&mut self) {
        let (width, height) = self.viewport;
        self.call("Emulation.clearDeviceMetricsOverride", json!({}));
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        self.settle();
    }

    /// Emulates `prefers-color-scheme: dark` (or light), and waits for the
    /// page to draw a frame with it.
    pub fn set_dark(&mut self, dark: bool) {
        let scheme = if dark { "dark" } else { "light" };
        self.call(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        );
        self.settle();
    }

    /// Whether the page's background differs between light and dark mode.
    pub fn dark_differs(&mut self) -> bool {
        let (light, dark) = self.backgrounds();
        light != dark
    }

    /// The page's background in light and in dark mode: the computed
    /// `background-color` of `<body>`, or of `<html>` where the body's is
    /// transparent, or else the browser's own `Canvas` colour, which turns
    /// dark for a page that declares `color-scheme: light dark`. Leaves the
    /// page light.
    pub fn backgrounds(&mut self) -> (String, String) {
        const BACKGROUND: &str = r#"(() => {
            const transparent = c => c === 'transparent' || c === 'rgba(0, 0, 0, 0)';
            for (const el of [document.body, document.documentElement]) {
                const colour = getComputedStyle(el).backgroundColor;
                if (!transparent(colour)) return colour;
            }
            const probe = document.createElement('div');
            probe.style.backgroundColor = 'Canvas';
            document.body.appendChild(probe);
            const canvas = getComputedStyle(probe).backgroundColor;
            probe.remove();
            return `${canvas} (Canvas)`;
        })()"#;
        self.set_dark(false);
        let light = self.eval(BACKGROUND);
        self.set_dark(true);
        let dark = self.eval(BACKGROUND);
        self.set_dark(false);
        let text = |v: Value| v.as_str().unwrap_or("?").to_owned();
        (text(light), text(dark))
    }

    /// Waits for web fonts, then for two animation frames: layout done and
    /// painted.
    fn settle(&mut self) {
        self.eval(
            "document.fonts.ready.then(() => new Promise(done => \
             requestAnimationFrame(() => requestAnimationFrame(() => done(true)))))",
        );
    }

    /// Sends a command to the page and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call_in(Some(&session), method, params)
    }

    /// Sends a command to the browser itself and waits for its answer.
    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.call_in(None, method, params)
    }

    fn call_in(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        // What a failure names: the method, and the script it evaluates.
        let what = match params["expression"].as_str() {
            Some(js) => {
                let js: String = js.split_whitespace().collect::<Vec<_>>().join(" ");
                let short: String = js.chars().take(80).collect();
                format!("{method} of `{short}`")
            }
            None => method.to_owned(),
        };
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        if self.to_chromium.send(bytes).is_err() {
            panic!(
                "sending {what}: chromium's pipe is closed{}",
                self.log_tail()
            );
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let message = self.next_message(deadline, &format!("chromium's answer to {what}"));
            if message["id"].as_u64() == Some(id) {
                if let Some(error) = message.get("error") {
                    panic!("{what} failed: {error}");
                }
                return message["result"].clone();
            }
            self.handle(message);
        }
    }

    /// Reads events until `done` holds, for at most [`WAIT`].
    fn wait_until(&mut self, what: &str, done: impl Fn(&Browser) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            let message = self.next_message(deadline, what);
            self.handle(message);
        }
    }

    /// Handles the events already read, without waiting.
    fn drain(&mut self) {
        // After an error (Chromium gone) the next wait finds the pipe closed.
        while let Ok(Ok(message)) = self.from_chromium.try_recv() {
            self.pending.push_back(message);
        }
        while let Some(message) = self.pending.pop_front() {
            self.handle(message);
        }
    }

    fn next_message(&mut self, deadline: Instant, what: &str) -> Value {
        if let Some(message) = self.pending.pop_front() {
            return message;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.from_chromium.recv_timeout(left) {
            Ok(Ok(message)) => message,
            Ok(Err(why)) => panic!("waiting for {what}: {why}{}", self.log_tail()),
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "waited {} s for {what} in vain{}",
                    WAIT.as_secs(),
                    self.log_tail()
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "waiting for {what}: chromium's pipe is closed{}",
                    self.log_tail()
                )
            }
        }
    }

    /// Takes note of an event of our page: a load, a console error.
    fn handle(&mut self, event: Value) {
        if event["sessionId"].as_str() != Some(&self.session) {
            return;
        }
        let params = &event["params"];
        match event["method"].as_str().unwrap_or_default() {
            "Page.loadEventFired" => self.loads += 1,
            "Runtime.exceptionThrown" => {
                let text = exception_text(&params["exceptionDetails"]);
                self.console_errors.push(text);
            }
            "Runtime.consoleAPICalled"
                if matches!(params["type"].as_str(), Some("error" | "assert")) =>
            {
                let args: Vec<String> = params["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|arg| match &arg["value"] {
                        Value::String(s) => s.clone(),
                        Value::Null => arg["description"].as_str().unwrap_or("?").to_owned(),
                        value => value.to_string(),
                    })
                    .collect();
                self.console_errors.push(format!(
                    "console.{}: {}",
                    params["type"].as_str().unwrap(),
                    args.join(" ")
                ));
            }
            "Log.entryAdded" if params["entry"]["level"] == "error" => {
                let entry = &params["entry"];
                let mut text = entry["text"].as_str().unwrap_or("?").to_owned();
                if let Some(url) = entry["url"].as_str() {
                    text.push_str(&format!(" ({url})"));
                }
                self.console_errors.push(text);
            }
            _ => {}
        }
    }

    /// The end of Chromium's own output, for a failure message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.profile.join("chromium.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        if lines.is_empty() {
            return " (chromium printed nothing)".to_owned();
        }
        let tail = lines[lines.len().saturating_sub(20)..].join("\n    ");
        format!("\n  chromium's output ends:\n    {tail}")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask Chromium to quit, give it 5 s, then kill it. Nothing here may
        // panic: this also runs while a failed test unwinds.
        // (CDP ids are 32-bit integers: a larger one is refused.)
        let close = json!({"id": self.next_id + 1, "method": "Browser.close", "params": {}});
        let mut bytes = serde_json::to_vec(&close).unwrap_or_default();
        bytes.push(0);
        let _ = self.to_chromium.send(bytes);
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Chromium's helpers may still be writing into the profile a moment.
        for _ in 0..50 {
            if std::fs::remove_dir_all(&self.profile).is_ok() || !self.profile.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The first of `chromium`, `chromium-browser`, `google-chrome` on `PATH`.
fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

fn running_as_root() -> bool {
    // The effective uid, second on the `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|uid| uid == "0"))
        .unwrap_or(false)
}

/// One line for an exception: its message, where it was thrown.
fn exception_text(details: &Value) -> String {
    let message = details["exception"]["description"]
        .as_str()
        .or(details["text"].as_str())
        .unwrap_or("?")
        .lines()
        .next()
        .unwrap_or("?")
        .to_owned();
    match details["url"].as_str() {
        Some(url) if !url.is_empty() => {
            let line = details["lineNumber"].as_u64().unwrap_or(0) + 1;
            format!("{message} ({url}:{line})")
        }
        _ => message,
    }
}

/// Why the page is wider than the viewport. The viewport's width is
/// `document.documentElement.clientWidth`: `window.innerWidth` less a
/// vertical scrollbar, where there is one (with `innerWidth`, a page 15 px
/// too wide would pass). First the page as a whole (its `scrollWidth`); then
/// each element that sticks out of the viewport on the left or right,
/// outermost only. Not counted: elements inside one whose `overflow-x` is
/// `auto` or `scroll` (a wide table in a box that scrolls on purpose), inside
/// an `<svg>` (which clips), and elements with no size. An element cut off
/// by `overflow: hidden` counts: what is cut off is lost to the reader.
const OVERFLOW_JS: &str = r#"(() => {
    const vw = document.documentElement.clientWidth;
    const found = [];
    const doc = document.documentElement;
    if (doc.scrollWidth > vw) found.push(`the page is ${doc.scrollWidth} px wide in a ${vw} px viewport`);
    const scrollsSideways = el => {
        for (let a = el.parentElement; a; a = a.parentElement) {
            const o = getComputedStyle(a).overflowX;
            if (o === 'auto' || o === 'scroll') return true;
        }
        return false;
    };
    const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
        + [...el.classList].map(c => '.' + c).join('');
    const outside = [];
    for (const el of document.body.querySelectorAll('*')) {
        if (el.ownerSVGElement || outside.some(o => o.contains(el))) continue;
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        if (r.left >= -0.5 && r.right <= vw + 0.5) continue;
        if (scrollsSideways(el)) continue;
        outside.push(el);
    }
    for (const el of outside.slice(0, 10)) {
        const r = el.getBoundingClientRect();
        found.push(`<${name(el)}> spans ${Math.round(r.left)}..${Math.round(r.right)} px (${Math.round(r.width)} px wide) in a ${vw} px viewport`);
    }
    if (outside.length > 10) found.push(`and ${outside.length - 10} more elements`);
    return found;
})()"#;

/// Every top-level `<svg>` (not one inside another): how it is named, how
/// many child elements it has, its box, whether it is shown at all, and the
/// viewport's width less a scrollbar (`room`).
const SVGS_JS: &str = r#"[...document.querySelectorAll('svg')]
    .filter(s => !s.parentElement || !s.parentElement.closest('svg'))
    .map((s, i) => {
        const r = s.getBoundingClientRect();
        const title = s.getAttribute('aria-label') || s.querySelector(':scope > title')?.textContent || '';
        const name = 'svg' + (s.id ? '#' + s.id : '') + [...s.classList].map(c => '.' + c).join('');
        const box = s.parentElement && s.parentElement.closest('figure, .scroll');
        const scrolls = !!box && getComputedStyle(box).overflowX === 'auto';
        const texts = [...s.querySelectorAll('text')].filter(t => t.textContent.trim() !== '')
            .map(t => t.getBoundingClientRect().height).filter(h => h > 0);
        return { index: i + 1, name, title: title.trim().slice(0, 60), children: s.childElementCount,
                 width: r.width, height: r.height, visible: s.checkVisibility(),
                 room: document.documentElement.clientWidth, scrolls,
                 smallest_text: texts.length ? Math.min(...texts) : null };
    })"#;

/// The smallest text a figure may draw, in CSS pixels as shown: the
/// height of a line of about 7 px type, the least a phone's screen shows
/// legibly.
const SMALLEST_TEXT_PX: f64 = 8.5;

/// Why one `<svg>` (as [`SVGS_JS`] describes it) is not drawn properly: it
/// has nothing in it, or a box too small to read, wider than the viewport or
/// absurdly tall.
fn svg_problems(svg: &Value) -> Vec<String> {
    let mut label = format!(
        "<svg> number {} ({}",
        svg["index"],
        svg["name"].as_str().unwrap_or("svg")
    );
    if let Some(title) = svg["title"].as_str().filter(|t| !t.is_empty()) {
        label.push_str(&format!(", \"{title}\""));
    }
    label.push(')');
    let (w, h) = (
        svg["width"].as_f64().unwrap_or(0.0),
        svg["height"].as_f64().unwrap_or(0.0),
    );
    let room = svg["room"].as_f64().unwrap_or(0.0);
    let mut problems = Vec::new();
    if svg["children"].as_u64() == Some(0) {
        problems.push(format!("{label} is empty: no child elements"));
    }
    if svg["visible"] == false {
        problems.push(format!(
            "{label} is not shown (display: none, or inside a closed <details>)"
        ));
    } else if !(w > 50.0 && (w <= room || svg["scrolls"] == true) && h > 30.0 && h < 5000.0) {
        problems.push(format!(
            "{label} is drawn {w:.0} × {h:.0} px; wanted wider than 50 px and at most the {room:.0} px viewport (unless it scrolls in its own box), taller than 30 px and under 5000 px"
        ));
    }
    if let Some(smallest) = svg["smallest_text"].as_f64() {
        if svg["visible"] != false && smallest < SMALLEST_TEXT_PX {
            problems.push(format!(
                "{label} has text {smallest:.1} px high at a {room:.0} px viewport; wanted {SMALLEST_TEXT_PX} px or more"
            ));
        }
    }
    problems
}

/// Standard base64 (RFC 4648 §4, with padding), as CDP sends binary data.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut held) = (0u32, 0);
    for &c in text {
        bits = bits << 6 | u32::from(value(c)?);
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
        }
    }
    Some(out)
}

/// Width and height of a PNG file, from its IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

/// A page of the kind numalab writes: a heading, a table, an inline figure,
/// light and dark colours.
const GOOD_PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>good</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font-family: sans-serif; margin: 1rem; background: #fff; color: #222; }
  @media (prefers-color-scheme: dark) { body { background: #15171a; color: #ddd; } }
  svg { width: 100%; max-width: 640px; height: auto; }
  .wide { overflow-x: auto; }
  table { border-collapse: collapse; }
  td { padding: 0 1rem; white-space: nowrap; }
</style></head>
<body><h1>Latency</h1>
<div class="wide"><table><tr><td>node 0 to node 0</td><td>92 ns</td><td>local</td>
<td>node 0 to node 1</td><td>141 ns</td><td>remote</td><td>node 0 to node 2</td><td>203 ns</td></tr></table></div>
<svg viewBox="0 0 640 240" role="img" aria-label="latency by node"><title>latency by node</title>
<rect x="40" y="40" width="80" height="160" fill="#4477aa"/><rect x="160" y="100" width="80" height="100" fill="#ee6677"/>
<line x1="30" y1="200" x2="620" y2="200" stroke="currentColor"/></svg>
</body></html>
"##;

fn write_page(scratch: &Scratch, name: &str, html: &str) -> PathBuf {
    let path = scratch.0.join(name);
    std::fs::write(&path, html).unwrap();
    path
}

#[test]
fn a_good_page_passes_at_both_widths_light_and_dark() {
    let scratch = Scratch::new("browser-good");
    let page = write_page(&scratch, "good.html", GOOD_PAGE);
    let Some(report) = check_page(&page, "harness-good") else {
        return;
    };
    assert!(
        report.dark_differs,
        "the page has a dark background in dark mode"
    );
    assert_eq!(
        report.checks.iter().map(|c| c.svgs).collect::<Vec<_>>(),
        [1, 1]
    );
    for (check, shots) in report.checks.iter().zip(report.screenshots.chunks(2)) {
        for shot in shots {
            let (w, h) = png_size(shot);
            assert_eq!(w, check.width, "{}", shot.display());
            assert!(h >= check.height, "the whole page: {}", shot.display());
        }
        assert_ne!(
            std::fs::read(&shots[0]).unwrap(),
            std::fs::read(&shots[1]).unwrap(),
            "light and dark screenshots differ"
        );
    }
}

#[test]
fn a_script_error_is_caught_and_named() {
    let scratch = Scratch::new("browser-js-error");
    let page = write_page(
        &scratch,
        "error.html",
        &GOOD_PAGE.replace("</body>", "<script>undefined_fn()</script></body>"),
    );
    let Some(report) = inspect_page(&page, "harness-js-error") else {
        return;
    };
    let problems = report.problems();
    for width in [1280, 390] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("at {width} px: console error"))
                    && p.contains("ReferenceError: undefined_fn is not defined")),
            "{problems:#?}"
        );
    }
    assert_eq!(problems.len(), 2, "nothing else wrong: {problems:#?}");
}

#[test]
fn a_console_error_and_a_missing_file_are_caught() {
    let scratch = Scratch::new("browser-console");
    let page = write_page(
        &scratch,
        "console.html",
        &GOOD_PAGE.replace(
            "</body>",
            "<script>console.error('figure', 3, 'has no data')</script><img src=\"missing.png\" alt=\"\"></body>",
        ),
    );
    let Some(mut browser) = Browser::start() else {
        return;
    };
    let check = browser.load(&page, 1280, 800);
    let errors = check.console_errors.join("\n");
    assert!(
        errors.contains("console.error: figure 3 has no data"),
        "{errors}"
    );
    assert!(errors.contains("missing.png"), "{errors}");
}

#[test]
fn a_page_wider_than_a_phone_is_caught() {
    let scratch = Scratch::new("browser-overflow");
    let page = write_page(
        &scratch,
        "wide.html",
        &GOOD_PAGE.replace(
            "<h1>",
            r#"<div id="banner" style="width: 2000px; height: 20px"></div><h1>"#,
        ),
    );
    let Some(report) = inspect_page(&page, "harness-overflow") else {
        return;
    };
    let problems = report.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("at 390 px: overflow: the page is")),
        "{problems:#?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("at 390 px: overflow: <div#banner> spans")),
        "{problems:#?}"
    );
    // The wide table scrolls in its own box: that is not overflow.
    assert!(
        !problems
            .iter()
            .any(|p| p.contains("<table") || p.contains("<td")),
        "{problems:#?}"
    );
}

#[test]
fn an_empty_figure_is_caught() {
    let scratch = Scratch::new("browser-empty-svg");
    let page = write_page(
        &scratch,
        "empty.html",
        &GOOD_PAGE.replace("</body>", "<svg id=\"empty\"></svg></body>"),
    );
    let Some(report) = inspect_page(&page, "harness-empty-svg") else {
        return;
    };
    let problems = report.problems();
    for width in [1280, 390] {
        assert!(
            problems.contains(&format!(
                "at {width} px: <svg> number 2 (svg#empty) is empty: no child elements"
            )),
            "{problems:#?}"
        );
    }
    assert_eq!(problems.len(), 2, "the good figure passes: {problems:#?}");
}

#[test]
fn dark_colours_are_told_apart_from_light_only_pages() {
    let scratch = Scratch::new("browser-no-dark");
    let light_only = GOOD_PAGE.replace(
        "@media (prefers-color-scheme: dark)",
        "@media (max-width: 1px)",
    );
    // No colours of its own, but the browser's dark canvas.
    let scheme_only = GOOD_PAGE.replace(
        "body { font-family: sans-serif; margin: 1rem; background: #fff; color: #222; }\n  \
         @media (prefers-color-scheme: dark) { body { background: #15171a; color: #ddd; } }",
        ":root { color-scheme: light dark; }",
    );
    assert_ne!(scheme_only, GOOD_PAGE);
    let page = write_page(&scratch, "light.html", &light_only);
    let Some(mut browser) = Browser::start() else {
        return;
    };
    eprintln!("browser: {}", browser.version());
    browser.load(&page, 1280, 800);
    assert_eq!(
        browser.backgrounds(),
        ("rgb(255, 255, 255)".into(), "rgb(255, 255, 255)".into())
    );
    assert!(!browser.dark_differs());
    let dark = write_page(&scratch, "dark.html", GOOD_PAGE);
    browser.load(&dark, 390, 844);
    assert_eq!(
        browser.backgrounds(),
        ("rgb(255, 255, 255)".into(), "rgb(21, 23, 26)".into())
    );
    let scheme = write_page(&scratch, "scheme.html", &scheme_only);
    browser.load(&scheme, 390, 844);
    let (light, dark) = browser.backgrounds();
    assert!(
        light.ends_with("(Canvas)") && light != dark,
        "{light} / {dark}"
    );
}

/// `numalab report --html` as a reader opens it. The page is being
/// reworked: this is what it must pass.
/// What the page's figures are, counted in the browser: node boxes and
/// distance arcs in the topology picture, figures by caption.
fn figures_on(browser: &mut Browser) -> Value {
    browser.eval(
        "({nodes: document.querySelectorAll('svg.topology rect.node').length, \
           memory_only: document.querySelectorAll('svg.topology rect.memory-only').length, \
           arcs: document.querySelectorAll('svg.topology path.link').length, \
           arc_labels: Array.from(document.querySelectorAll('svg.topology .link-label')).map(t => t.textContent), \
           captions: Array.from(document.querySelectorAll('figcaption')).map(c => c.textContent), \
           tables: document.querySelectorAll('table').length, \
           pre: document.querySelectorAll('pre').length})",
    )
}

fn captions_starting(figures: &Value, prefix: &str) -> usize {
    figures["captions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.as_str().unwrap().starts_with(prefix))
        .count()
}

/// The page of a saved report (`numalab report --from`), checked at both
/// widths, light and dark; what its figures are, counted in the browser.
fn saved_report_page(name: &str, report: &Path) -> Option<Value> {
    let scratch = Scratch::new(&format!("browser-{name}"));
    let page = scratch.path(&format!("{name}.html"));
    let out = numalab(&["report", "--from", report.to_str().unwrap(), "-o", &page]);
    assert!(out.status.success(), "{}", stderr(&out));
    let checked = check_page(Path::new(&page), name)?;
    assert!(checked.dark_differs, "{:?}", checked.backgrounds);
    let mut browser = Browser::start()?;
    browser.load(Path::new(&page), 1280, 800);
    Some(figures_on(&mut browser))
}

fn saved(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/results/{name}"))
}

/// The saved report's own firmware distance from `a` to `b`.
fn slit(report: &Value, a: u64, b: u64) -> u64 {
    let distances = &report["topology"]["topology"]["distances"];
    let nodes: Vec<u64> = distances["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    let at = |n| nodes.iter().position(|x| *x == n).unwrap();
    distances["values"][at(a)][at(b)].as_u64().unwrap()
}

#[test]
fn report_page_renders_in_a_real_browser() {
    let scratch = Scratch::new("browser-report");
    let page = scratch.path("report.html");
    let out = numalab(&["report", "--quick", "--html", &page]);
    assert!(out.status.success(), "{}", stderr(&out));
    let Some(report) = check_page(Path::new(&page), "report") else {
        return;
    };
    assert!(
        report.dark_differs,
        "the page's background is the same with prefers-color-scheme: dark \
         (light, dark at 1280 and 390 px): {:?}",
        report.backgrounds
    );
    let mut browser = Browser::start().unwrap();
    browser.load(Path::new(&page), 1280, 800);
    let figures = figures_on(&mut browser);
    eprintln!("this machine's page: {figures}");
    // The kernel's node count, not numalab's.
    let nodes = sysfs_nodes().len();
    assert_eq!(figures["nodes"], nodes as u64, "{figures}");
    assert_eq!(figures["pre"], 0, "tables are HTML tables: {figures}");
    assert!(figures["tables"].as_u64().unwrap() >= 5, "{figures}");
    let heat_maps = captions_starting(&figures, "Idle latency, ns:");
    if nodes == 1 {
        assert_eq!(heat_maps, 0, "no 1×1 heat map: {figures}");
        assert_eq!(figures["arcs"], 0);
    } else {
        assert_eq!(heat_maps, 1, "{figures}");
    }
    assert_eq!(
        captions_starting(&figures, "What 4 KiB pages cost"),
        1,
        "{figures}"
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 && nodes == 1 {
        assert_eq!(
            captions_starting(&figures, "How many threads"),
            1,
            "{figures}"
        );
    }
}

#[test]
fn report_pages_of_the_emulated_two_and_four_node_machines_render() {
    for (name, nodes, memory_only) in [("two-socket", 2, 0), ("cxl", 4, 2)] {
        let path = saved(&format!("report-{name}.json"));
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let Some(figures) = saved_report_page(name, &path) else {
            return;
        };
        eprintln!("{name}: {figures}");
        assert_eq!(figures["nodes"], nodes, "{name}: {figures}");
        assert_eq!(figures["memory_only"], memory_only, "{name}: {figures}");
        // An arc for every pair of nodes, labelled with the preset's SLIT.
        assert_eq!(
            figures["arcs"],
            nodes * (nodes - 1) / 2,
            "{name}: {figures}"
        );
        let expected = if slit(&report, 0, 1) == slit(&report, 1, 0) {
            slit(&report, 0, 1).to_string()
        } else {
            format!("{}/{}", slit(&report, 0, 1), slit(&report, 1, 0))
        };
        assert_eq!(
            figures["arc_labels"][0],
            expected.as_str(),
            "{name}: {figures}"
        );
        assert_eq!(
            captions_starting(&figures, "Idle latency, ns:"),
            1,
            "{name}: heat map from 2×2 up"
        );
        assert_eq!(
            captions_starting(&figures, "Read bandwidth, GB/s"),
            1,
            "{name}"
        );
    }
}

#[test]
fn the_topology_picture_stays_readable_at_64_nodes() {
    // The cxl report with its machine swapped for a synthetic 64-node one
    // (4 packages of 16 nodes): only the picture is under test here.
    let mut report: Value =
        serde_json::from_str(&std::fs::read_to_string(saved("report-cxl.json")).unwrap()).unwrap();
    let machine = numalab::Topology::from_synthetic("pack:4 numa:16 core:2 pu:1").unwrap();
    report["topology"]["topology"] = serde_json::to_value(&machine).unwrap();
    let scratch = Scratch::new("browser-64");
    let path = scratch.path("report-64.json");
    std::fs::write(&path, report.to_string()).unwrap();
    let Some(figures) = saved_report_page("sixty-four-nodes", Path::new(&path)) else {
        return;
    };
    assert_eq!(figures["nodes"], 64, "{figures}");
    assert_eq!(figures["arcs"], 0, "no 2,016 arcs: {figures}");
}

#[test]
fn the_fleet_page_and_its_host_pages_render() {
    // Three machines, three hosts each, one host's read bandwidth planted
    // at 60%: one flagged host with a page of its own.
    let scratch = Scratch::new("browser-fleet");
    let results = scratch.0.join("results");
    std::fs::create_dir_all(&results).unwrap();
    for name in ["two-socket", "cxl", "lopsided"] {
        let text = std::fs::read_to_string(saved(&format!("report-{name}.json"))).unwrap();
        for i in 0..3 {
            let mut doc: Value = serde_json::from_str(&text).unwrap();
            let host = format!("{name}-{i}");
            doc["host"] = Value::from(host.clone());
            if i == 2 && name == "two-socket" {
                for cell in doc["matrix"]["bandwidth"]["cells"].as_array_mut().unwrap() {
                    let median = cell["read_gbps"]["median"].as_f64().unwrap();
                    cell["read_gbps"]["median"] = Value::from(median * 0.6);
                }
            }
            std::fs::write(results.join(format!("{host}.json")), doc.to_string()).unwrap();
        }
    }
    let page = scratch.path("fleet.html");
    let out = numalab(&["fleet", results.to_str().unwrap(), "--html", &page]);
    assert!(out.status.success(), "{}", stderr(&out));
    let Some(checked) = check_page(Path::new(&page), "fleet") else {
        return;
    };
    assert!(checked.dark_differs, "{:?}", checked.backgrounds);
    let host_page = scratch.0.join("fleet-hosts/two-socket-2.html");
    assert!(
        host_page.exists(),
        "the flagged host's page: {}",
        stdout(&out)
    );
    check_page(&host_page, "fleet-host");
}
