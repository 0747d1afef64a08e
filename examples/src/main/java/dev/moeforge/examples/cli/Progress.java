package dev.moeforge.examples.cli;

import java.io.PrintWriter;
import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;

/**
 * Reports a step once it has run for longer than a second, so that no step of minutes is silent:
 * on a terminal with a progress bar, elsewhere (a log, a pipe) with a plain line then, one every
 * {@link #PLAIN_EVERY} after and one at the end. A step that ends within the second prints nothing.
 */
final class Progress implements AutoCloseable {
    /** How long a step runs before it is reported. */
    static final Duration QUIET = Duration.ofSeconds(1);
    /** How often a plain line repeats while the step runs. */
    static final Duration PLAIN_EVERY = Duration.ofSeconds(15);

    private final PrintWriter out;
    private final String task;
    private final long total;
    private final boolean terminal;
    private final long startNanos = System.nanoTime();
    private final AtomicLong done = new AtomicLong();
    private final ScheduledExecutorService timer;
    /** Guarded by this; the bar exists only on a terminal, once the step has run past {@link #QUIET}. */
    private ProgressBar bar;
    private boolean shown;
    private boolean closed;

    private Progress(PrintWriter out, String task, long total, boolean terminal) {
        this.out = out;
        this.task = task;
        this.total = total;
        this.terminal = terminal;
        if (out == null) {
            timer = null;
            return;
        }
        timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "progress of " + task);
            t.setDaemon(true);
            return t;
        });
        if (terminal) {
            timer.schedule(this::show, QUIET.toMillis(), TimeUnit.MILLISECONDS);
        } else {
            timer.scheduleAtFixedRate(this::show, QUIET.toMillis(), PLAIN_EVERY.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    /** A step of {@code total} units ({@code 0}: not counted), reported on {@code out} as plain lines when not on a terminal. */
    static Progress start(PrintWriter out, String task, long total) {
        return new Progress(out, task, total, onTerminal());
    }

    /** A step that reports nothing (e.g. a test's compile). */
    static Progress none() {
        return new Progress(null, "", 0, false);
    }

    /** Whether this process writes to a terminal (in JDK 22+ System.console() may exist without one). */
    static boolean onTerminal() {
        java.io.Console console = System.console();
        return console != null && console.isTerminal();
    }

    /** One unit of the step is done; safe from any thread. */
    void step() {
        done.incrementAndGet();
        synchronized (this) {
            if (bar != null) {
                bar.step();
            }
        }
    }

    private synchronized void show() {
        if (closed) {
            return;
        }
        shown = true;
        if (terminal) {
            bar = new ProgressBarBuilder().setTaskName(task.strip()).setInitialMax(total > 0 ? total : -1)
                    .setStyle(ProgressBarStyle.ASCII).continuousUpdate().setUpdateIntervalMillis(250)
                    .startsFrom(done.get(), elapsed()).build();
        } else {
            out.println(task + ": " + (total > 0 ? done.get() + " of " + total + " done, " : "running, ") + seconds() + " so far");
        }
    }

    @Override
    public void close() {
        if (timer == null) {
            return;
        }
        timer.shutdownNow();
        synchronized (this) {
            closed = true;
            if (bar != null) {
                bar.stepTo(done.get());
                bar.close();
            } else if (shown) {
                out.println(task + ": " + (total > 0 ? done.get() + " of " + total + " done" : "done") + " in " + seconds());
            }
        }
    }

    private Duration elapsed() {
        return Duration.ofNanos(System.nanoTime() - startNanos);
    }

    private String seconds() {
        return String.format(Locale.ROOT, "%.1f s", elapsed().toMillis() / 1000.0);
    }
}
