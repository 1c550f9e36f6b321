# TTFT against offered load, from serving_bench's TSV: one colour per configuration, p50 solid,
# p99 dashed. Both axes are logarithmic: the rates double from point to point, and TTFT spans
# from a fraction of a second (under-load) to tens of seconds (queueing under over-load).
#   gnuplot -e "data='serving.tsv'; out='docs/serving_latency.png'" bench/plot_serving.gp
if (!exists("data")) data = 'serving_bench.tsv'
if (!exists("out")) out = 'docs/serving_latency.png'

set terminal pngcairo size 960,600 font ",11"
set output out
set datafile separator "\t"
set key top left box opaque
set logscale x 2
set logscale y 10
set grid xtics ytics mxtics mytics lw 0.5 lc rgb "#dddddd"
set xlabel "offered load (requests/s, Poisson arrivals)"
set ylabel "time to first token (s)"
set title "SmolLM2-135M Q4\\_1, 1 thread: TTFT vs offered load (solid p50, dashed p99)"

configurations = "static static+chunked continuous continuous+chunked"
colours = "#d62728 #ff7f0e #1f77b4 #2ca02c"
# Rows are written configuration by configuration, so the rows of one configuration are
# consecutive and filtering the others out leaves an unbroken line.
pick(column_number, name) = (strcol(1) eq name) ? column(column_number) : NaN

plot for [i=1:words(configurations)] data skip 1 \
         using 2:(pick(7, word(configurations, i))) with linespoints lw 2 pt 7 \
         lc rgb word(colours, i) dt 1 title word(configurations, i)." p50", \
     for [i=1:words(configurations)] data skip 1 \
         using 2:(pick(8, word(configurations, i))) with linespoints lw 2 pt 6 \
         lc rgb word(colours, i) dt 2 title word(configurations, i)." p99"
