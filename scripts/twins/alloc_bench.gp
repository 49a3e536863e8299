# alloc_bench.gp - ns per malloc+free pair by pattern: oomlab, PyTorch's caching allocator and cudaMallocAsync,
# from the TSV of scripts/twins/alloc_bench.py (median as the bar, an error bar up to the p90), log scale.
#   gnuplot -c scripts/twins/alloc_bench.gp alloc_bench.tsv out.png     (alloc_bench.py plot does this)
# The paths arrive as ARG1 and ARG2 and are used only as strings.
data = ARG1
set terminal pngcairo size 1100,520 font "sans,10" noenhanced
set output ARG2
set datafile separator "\t"
set datafile missing "NaN"
set title "Caching allocator: ns per malloc+free pair (bar: median over the rounds, line: up to p90)\nabove each pattern: PyTorch median / oomlab median"
set ylabel "ns per pair (log scale)"
set logscale y
set yrange [10:20000]
set grid ytics lc rgb "#cccccc"
set key below horizontal
set style data histograms
set style histogram errorbars gap 1.5 lw 1
set style fill solid 0.85 border -1
set boxwidth 0.9
# labels end under their group (a label rotated the other way starts there and reads as the next group's)
set xtics rotate by 25 right nomirror
set bmargin 6
plot data using 2:2:3:xtic(1) title "oomlab" lc rgb "#1b9e77", \
     ''   using 4:4:5 title "PyTorch 2.11 (raw_alloc)" lc rgb "#d95f02", \
     ''   using 6:6:7 title "cudaMallocAsync" lc rgb "#7570b3", \
     ''   using 0:(9000):(sprintf("%.1fx", $4 / $2)) with labels notitle, \
     ''   using ($0 + 0.3):(valid(6) ? NaN : 24):("cudaMallocAsync\nnot timed") with labels font "sans,8" notitle
