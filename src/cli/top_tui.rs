//! `rprof top`'s terminal UI (crossterm): the alternate screen in raw mode, the table redrawn at each refresh
//! to the terminal's size, keys read on a thread of their own, and the terminal restored however the view
//! ends. The keys are perf top's: q (Esc, Ctrl-C) quits, p pauses the display, the arrows select a row, `d`
//! zooms into the selected row's binary and `t` into its process (the same key or Esc zooms out), the zoom
//! said on the title line as perf says it (`, DSO: NAME`, `, Thread: COMM(PID)`).
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, style, terminal};
use rprof::record::RecordSummary;
use rprof::top::{format_rows, short_name, Hide, Row, Screen, TopConfig, Zoom};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The terminal as it was, given back on drop (raw mode off, main screen, cursor shown).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

pub fn run(
    cfg: &TopConfig,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
) -> anyhow::Result<RecordSummary> {
    terminal::enable_raw_mode()?;
    let restore = Restore;
    execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        cursor::Hide,
        terminal::Clear(terminal::ClearType::All)
    )?;
    draw_waiting(cfg);
    let view = Arc::new(Mutex::new(View::new(cfg, Arc::clone(&paused))));
    let keys = {
        let (stop, view) = (Arc::clone(&stop), Arc::clone(&view));
        std::thread::spawn(move || read_keys(&stop, &view))
    };
    let show: rprof::top::Show = {
        let view = Arc::clone(&view);
        Box::new(move |screen: &Screen| {
            if let Ok(mut v) = view.lock() {
                v.screen = Some(screen.clone());
                v.draw();
            }
        })
    };
    let summary = rprof::top::run(cfg, Arc::clone(&stop), paused, show, &mut |_| {});
    stop.store(true, Ordering::Relaxed);
    let _ = keys.join();
    drop(restore);
    Ok(summary?)
}

/// Until the first refresh: what is sampled and the keys.
fn draw_waiting(cfg: &TopConfig) {
    let line = format!(
        "rprof top: sampling [{}], the first table in {:.1} s; q quits, p pauses",
        cfg.event_name,
        cfg.delay.as_secs_f64()
    );
    let mut out = std::io::stdout().lock();
    let _ = queue!(out, cursor::MoveTo(0, 0), style::Print(line));
    let _ = out.flush();
}

/// Which zoom was taken (Esc undoes the last).
#[derive(Clone, Copy, PartialEq)]
enum ZoomKind {
    Binary,
    Process,
}

/// What the terminal shows: the last refresh, the selected row, the zooms.
struct View {
    screen: Option<Screen>,
    hide: Hide,
    count_filter: f64,
    limit: usize,
    paused: Arc<AtomicBool>,
    /// The selected row by its columns: it stays on its row while the order changes.
    selected: Option<(Vec<String>, bool)>,
    /// The selected row's place (kept where its row went away).
    index: usize,
    /// The first row on the screen.
    first: usize,
    zoom: Zoom,
    zooms: Vec<ZoomKind>,
}

impl View {
    fn new(cfg: &TopConfig, paused: Arc<AtomicBool>) -> View {
        View {
            screen: None,
            hide: cfg.hide,
            count_filter: cfg.count_filter as f64,
            limit: cfg.rows,
            paused,
            selected: None,
            index: 0,
            first: 0,
            zoom: Zoom::default(),
            zooms: Vec::new(),
        }
    }

    /// The rows under the zoom, the selection moved to its row.
    fn rows(&mut self) -> Vec<Row> {
        let Some(screen) = &self.screen else {
            return Vec::new();
        };
        let rows = screen
            .table
            .rows(self.hide, self.count_filter, self.limit, &self.zoom);
        if let Some(sel) = &self.selected {
            if let Some(i) = rows
                .iter()
                .position(|r| r.columns == sel.0 && r.kernel == sel.1)
            {
                self.index = i;
            }
        }
        self.index = self.index.min(rows.len().saturating_sub(1));
        self.selected = rows.get(self.index).map(|r| (r.columns.clone(), r.kernel));
        rows
    }

    /// Move the selection by `by` rows (negative: up).
    fn select(&mut self, by: isize) {
        let n = self.rows().len();
        self.index = self
            .index
            .saturating_add_signed(by)
            .min(n.saturating_sub(1));
        self.selected = None;
        self.rows();
        self.draw();
    }

    /// `d` or `t`: zoom into the selected row's binary or process, or out of that zoom if taken.
    fn toggle(&mut self, kind: ZoomKind) {
        let taken = match kind {
            ZoomKind::Binary => self.zoom.module.is_some(),
            ZoomKind::Process => self.zoom.process.is_some(),
        };
        if taken {
            self.zoom_out(kind);
        } else if let Some(row) = self.rows().get(self.index).cloned() {
            match kind {
                ZoomKind::Binary => self.zoom.module = Some(row.module),
                ZoomKind::Process => self.zoom.process = Some(row.process),
            }
            self.zooms.push(kind);
        }
        self.draw();
    }

    fn zoom_out(&mut self, kind: ZoomKind) {
        match kind {
            ZoomKind::Binary => self.zoom.module = None,
            ZoomKind::Process => self.zoom.process = None,
        }
        self.zooms.retain(|k| *k != kind);
    }

    /// The last line: the keys, or how to zoom out (perf's help line), or the pause.
    fn help_line(&self) -> String {
        if self.paused.load(Ordering::Relaxed) {
            return "PAUSED: p resumes, q quits".into();
        }
        match self.zooms.last() {
            Some(ZoomKind::Binary) => format!(
                "To zoom out press ESC or d (zoomed into the {} DSO)",
                self.zoom.module.as_deref().map_or("", short_name)
            ),
            Some(ZoomKind::Process) => format!(
                "To zoom out press ESC or t (zoomed into the {} thread)",
                self.zoom.process.as_ref().map_or("", |p| p.comm.as_str())
            ),
            None => "q: quit  p: pause  UP/DOWN: select  d: zoom into its DSO  t: into its thread"
                .into(),
        }
    }

    /// The whole screen: title (with the zoom), rule, the rows that fit with the selected one in reverse
    /// video, the help line last.
    fn draw(&mut self) {
        let Some(header) = self.screen.as_ref().map(|s| s.header.clone()) else {
            return;
        };
        let rows = self.rows();
        let (width, height) = terminal::size().unwrap_or((80, 24));
        let (width, height) = (usize::from(width), usize::from(height));
        let fit = height.saturating_sub(4).max(1);
        self.first = self.first.min(self.index);
        if self.index >= self.first + fit {
            self.first = self.index + 1 - fit;
        }
        let shown = &rows[self.first.min(rows.len())..rows.len().min(self.first + fit)];
        let title = format!("{header}{}", self.zoom.title());
        let mut out = std::io::stdout().lock();
        let _ = queue!(out, terminal::Clear(terminal::ClearType::All));
        let head = [title, "-".repeat(width.min(79))];
        for (i, line) in head.iter().enumerate() {
            let text: String = line.chars().take(width).collect();
            let _ = queue!(out, cursor::MoveTo(0, i as u16), style::Print(text));
        }
        for (i, line) in format_rows(shown).iter().enumerate() {
            let text = format!("{line:<width$}")
                .chars()
                .take(width)
                .collect::<String>();
            let _ = queue!(out, cursor::MoveTo(0, (i + 3) as u16));
            if self.first + i == self.index {
                let _ = queue!(
                    out,
                    style::PrintStyledContent(style::Stylize::reverse(text))
                );
            } else {
                let _ = queue!(out, style::Print(text));
            }
        }
        let help: String = self.help_line().chars().take(width).collect();
        let _ = queue!(
            out,
            cursor::MoveTo(0, height.saturating_sub(1) as u16),
            style::Print(help)
        );
        let _ = out.flush();
    }
}

/// The key loop, until `stop`.
fn read_keys(stop: &AtomicBool, view: &Mutex<View>) {
    while !stop.load(Ordering::Relaxed) {
        if !event::poll(Duration::from_millis(100)).unwrap_or(false) {
            continue;
        }
        let Ok(Event::Key(key)) = event::read() else {
            continue;
        };
        if key.kind == KeyEventKind::Release {
            continue;
        }
        let Ok(mut v) = view.lock() else {
            return;
        };
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => stop.store(true, Ordering::Relaxed),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                stop.store(true, Ordering::Relaxed)
            }
            // Esc zooms out of the last zoom, and quits when there is none (perf top asks first).
            KeyCode::Esc => match v.zooms.last().copied() {
                Some(kind) => {
                    v.zoom_out(kind);
                    v.draw();
                }
                None => stop.store(true, Ordering::Relaxed),
            },
            KeyCode::Char('p') | KeyCode::Char('P') => {
                v.paused.fetch_xor(true, Ordering::Relaxed);
                v.draw();
            }
            KeyCode::Char('d') => v.toggle(ZoomKind::Binary),
            KeyCode::Char('t') => v.toggle(ZoomKind::Process),
            KeyCode::Up => v.select(-1),
            KeyCode::Down => v.select(1),
            KeyCode::PageUp => v.select(-10),
            KeyCode::PageDown => v.select(10),
            KeyCode::Home => v.select(isize::MIN / 2),
            KeyCode::End => v.select(isize::MAX / 2),
            _ => {}
        }
    }
}
