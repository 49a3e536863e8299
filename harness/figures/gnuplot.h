/* gnuplot.h - drawing one figure with gnuplot: a script and its data files in a private temporary folder, the
 * terminal chosen by the output's extension (.png: pngcairo, .svg: svg), and the output written atomically:
 * gnuplot draws onto its standard output, a temporary file beside OUT that oomlab created (fileio_temp_beside,
 * O_EXCL), which is published as OUT (fileio_publish: only over a regular file) once gnuplot exited 0 and the
 * figure is whole (a PNG ends with its IEND chunk, an SVG with </svg>: a full disk cuts it short and gnuplot still
 * exits 0). Nothing is left behind on failure.
 *
 * Input stays data: every text from an input reaches the script through gp_string, a single-quoted string, in
 * which gnuplot expands nothing (no backquote command, no @macro; double-quoted strings expand backquotes), and
 * no name from an input is in the script (the output is a file descriptor, the data files are named by oomlab).
 *
 * Every figure oomlab draws sets the same terminal options (gp_begin): a white background, DejaVu Sans, text
 * taken literally (noenhanced: torch.cuda.empty_cache() has underscores), and nothing that depends on the time
 * or the folder, so the same data gives byte-identical files (tests/test_plot.c checks it).
 */
#ifndef OOMLAB_GNUPLOT_H
#define OOMLAB_GNUPLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define GP_MAX_FILES 64
#define GP_FONT "DejaVu Sans"

/* One figure being written. Invariant: dir exists while the figure is open (gp_begin .. gp_end/gp_abort) and
 * holds only script.gp and the files named in files[0..nfiles). */
typedef struct gp_figure {
    char dir[64];          /* the private temporary folder */
    char out[1024];        /* the output asked for */
    char out_tmp[1100];    /* what gnuplot writes (its standard output), published as out */
    int out_fd;            /* out_tmp, open; -1 once closed */
    FILE *gp;              /* the script */
    char files[GP_MAX_FILES][80];
    int nfiles;
    bool svg;
} gp_figure;

/* Check out (.png or .svg, its folder exists), make the folder and the output's temporary file, and start the
 * script with the terminal (width x height pixels, base font size font_pt). OOM_EINVAL: another extension (err
 * says which); OOM_EIO: the output's folder does not exist, or no temporary folder or file. */
oom_status gp_begin(gp_figure *f, const char *out, int width, int height, int font_pt, char *err, size_t errcap);
/* Open a data file NAME in the figure's folder for writing; its path (for the script) goes to path. NULL when it
 * cannot be created (too many files, or the disk). */
FILE *gp_data(gp_figure *f, const char *name, char *path, size_t cap);
/* Close a data file of gp_data: false when a write to it failed (the disk). */
bool gp_data_close(FILE *d);
/* Finish the script, run gnuplot, check its exit and that the figure is whole, publish it, and remove the folder.
 * OOM_EIO: gnuplot is not on PATH, or it failed (its last error line in err) or was killed, or the figure is cut
 * short or cannot be written; OOM_EINVAL: out exists and is not a regular file (fileio_publish). Nothing is
 * published then. */
oom_status gp_end(gp_figure *f, char *err, size_t errcap);
/* Give the figure up: remove its folder and any partial output. */
void gp_abort(gp_figure *f);

/* A text as a gnuplot script's string literal that reads back as itself and that gnuplot never expands: in
 * single quotes (a quote doubled, gnuplot's one escape there), a newline as the constant "\n" joined on ('a'."\n".'b'),
 * other control characters as spaces, so the line is never broken (gnuplot ends an unclosed string at the end of
 * its line and runs the next line as a command: tests/test_fuzz_regressions.c). Script text only: data files
 * carry numbers. */
void gp_string(FILE *f, const char *s);
/* Bytes in the unit a figure uses (MiB below 10 GiB, GiB from there): the factor and its name. */
double gp_unit(double max_bytes, const char **name);

OOM_END_DECLS

#endif
