//! Headless Chromium for the status page's tests: the rendered DOM
//! (`--dump-dom`, after scripts ran), console errors read from its log,
//! and screenshots decoded to pixels. Every run is bounded and killed at
//! its deadline.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One run of Chromium is given this long.
pub const RUN_WITHIN: Duration = Duration::from_secs(60);

/// Whether `chromium` is on the PATH.
pub fn available() -> bool {
    Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What one run left: the DOM (for `--dump-dom`), and the console lines
/// that report an error.
pub struct Run {
    pub dom: String,
    pub console_errors: Vec<String>,
}

fn run(args: &[&str], url: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let err = dir.path().join("err");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawning chromium");
    let deadline = Instant::now() + RUN_WITHIN;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "chromium failed ({status}) on {url}:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish {url} within {RUN_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    Run {
        dom: std::fs::read_to_string(&out).unwrap_or_default(),
        console_errors: console_errors(&log),
    }
}

/// The console lines of Chromium's log that report a script error or an
/// error logged by the page.
pub fn console_errors(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE"))
        .filter(|l| l.contains("Uncaught") || l.contains("ERROR:CONSOLE") || l.contains("Error"))
        .map(String::from)
        .collect()
}

/// The page at `url` as the browser rendered it.
pub fn dom(url: &str) -> Run {
    run(&["--dump-dom"], url)
}

/// A screenshot of `url` saved at `path`, `width` × `height` pixels.
pub fn screenshot(url: &str, path: &Path, width: u32, height: u32) -> Run {
    let _ = std::fs::remove_file(path);
    let r = run(
        &[
            &format!("--screenshot={}", path.display()),
            &format!("--window-size={width},{height}"),
        ],
        url,
    );
    assert!(path.exists(), "chromium wrote no screenshot of {url}");
    r
}

/// An RGB image read from a PNG file.
pub struct Image {
    pub width: usize,
    pub height: usize,
    /// RGB, row by row.
    pub pixels: Vec<[u8; 3]>,
}

impl Image {
    pub fn read(path: &Path) -> Image {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let channels = info.color_type.samples();
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        let pixels = buf[..info.buffer_size()]
            .chunks(channels)
            .map(|c| match channels {
                1 | 2 => [c[0]; 3],
                _ => [c[0], c[1], c[2]],
            })
            .collect();
        Image {
            width: info.width as usize,
            height: info.height as usize,
            pixels,
        }
    }

    /// The bounding boxes of the regions of exactly `colour`, as
    /// (x0, y0, x1, y1): the chart areas, found by their background.
    /// Regions are told apart by the rows between them.
    pub fn regions(&self, colour: [u8; 3]) -> Vec<(usize, usize, usize, usize)> {
        let mut out: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut current: Option<(usize, usize, usize, usize)> = None;
        for y in 0..self.height {
            let row = &self.pixels[y * self.width..(y + 1) * self.width];
            let xs: Vec<usize> = (0..self.width).filter(|&x| row[x] == colour).collect();
            match (xs.len() > 20, current.as_mut()) {
                (true, Some(c)) => {
                    c.0 = c.0.min(xs[0]);
                    c.2 = c.2.max(*xs.last().unwrap());
                    c.3 = y;
                }
                (true, None) => current = Some((xs[0], y, *xs.last().unwrap(), y)),
                (false, Some(_)) => out.push(current.take().unwrap()),
                (false, None) => {}
            }
        }
        out.extend(current);
        out.into_iter().filter(|r| r.3 - r.1 > 10).collect()
    }

    /// Pixels inside `r` within `tolerance` of `colour` on every channel:
    /// what a series of that colour drew there (antialiased edges aside).
    pub fn count_near(
        &self,
        r: (usize, usize, usize, usize),
        colour: [u8; 3],
        tolerance: i32,
    ) -> usize {
        let mut n = 0;
        for y in r.1..=r.3 {
            for x in r.0..=r.2 {
                let p = self.pixels[y * self.width + x];
                if p.iter()
                    .zip(colour)
                    .all(|(a, b)| (*a as i32 - b as i32).abs() <= tolerance)
                {
                    n += 1;
                }
            }
        }
        n
    }
}
