//! `rprof top`'s terminal UI (crossterm): the alternate screen in raw mode, the table redrawn at each refresh
//! to the terminal's size, keys read on a thread of their own (q or Ctrl-C quits, p pauses the display), and
//! the terminal restored however the view ends.
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, style, terminal};
use rprof::record::RecordSummary;
use rprof::top::{format_rows, Screen, TopConfig};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    let keys = {
        let (stop, paused) = (Arc::clone(&stop), Arc::clone(&paused));
        std::thread::spawn(move || read_keys(&stop, &paused))
    };
    let show: rprof::top::Show = Box::new(draw);
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

/// One refresh on the whole screen: header, rule, the rows that fit, the keys on the last line.
fn draw(screen: &Screen) {
    let (width, height) = terminal::size().unwrap_or((80, 24));
    let (width, height) = (usize::from(width), usize::from(height));
    let fit = height.saturating_sub(4);
    let rows = &screen.rows[..screen.rows.len().min(fit)];
    let mut lines = vec![
        screen.header.clone(),
        "-".repeat(width.min(79)),
        String::new(),
    ];
    lines.extend(format_rows(rows));
    let mut out = std::io::stdout().lock();
    let _ = queue!(out, terminal::Clear(terminal::ClearType::All));
    for (i, line) in lines.iter().enumerate() {
        let text: String = line.chars().take(width).collect();
        let _ = queue!(out, cursor::MoveTo(0, i as u16), style::Print(text));
    }
    let keys = "q: quit  p: pause/resume";
    let _ = queue!(
        out,
        cursor::MoveTo(0, height.saturating_sub(1) as u16),
        style::Print(keys)
    );
    let _ = out.flush();
}

/// The key loop: q, Q, Esc or Ctrl-C stop; p toggles the pause (said on the last line).
fn read_keys(stop: &AtomicBool, paused: &AtomicBool) {
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
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => {
                stop.store(true, Ordering::Relaxed)
            }
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                stop.store(true, Ordering::Relaxed)
            }
            KeyCode::Char('p') | KeyCode::Char('P') => {
                let now = !paused.fetch_xor(true, Ordering::Relaxed);
                let (_, height) = terminal::size().unwrap_or((80, 24));
                let text = match now {
                    true => "PAUSED: p resumes, q quits  ",
                    false => "q: quit  p: pause/resume    ",
                };
                let mut out = std::io::stdout().lock();
                let _ = queue!(
                    out,
                    cursor::MoveTo(0, height.saturating_sub(1)),
                    style::Print(text)
                );
                let _ = out.flush();
            }
            _ => {}
        }
    }
}
