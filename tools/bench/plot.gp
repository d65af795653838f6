# tools/bench/plot.gp — `make bench`'s plot: ketch vs etcd per workload
# (throughput, log scale; p99 latency), from ketch-bench compare's results.dat
# (columns: "workload" clients etcd_rps ketch_rps etcd_p99_ms ketch_p99_ms).
#   gnuplot -e "datafile='bench/results.dat'; outfile='bench/throughput.svg'; subtitle='...'" tools/bench/plot.gp
if (!exists("subtitle")) subtitle = ""
set terminal svg size 1000,760 dynamic font "sans,12" background rgb "white"
set output outfile
set multiplot layout 2,1 title "ketch vs etcd 3.4, 1 member each, same machine, medians of alternating rounds\n".subtitle
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top left
set logscale y
set ylabel "requests or events /s (log scale)"
set yrange [100:*]
plot datafile using 3:xtic(1) title "etcd" lc rgb "#888888", \
     "" using 4 title "ketch" lc rgb "#1f77b4"
set yrange [0.01:*]
set ylabel "p99 latency, ms (log scale)"
plot datafile using 5:xtic(1) title "etcd" lc rgb "#888888", \
     "" using 6 title "ketch" lc rgb "#1f77b4"
unset multiplot
