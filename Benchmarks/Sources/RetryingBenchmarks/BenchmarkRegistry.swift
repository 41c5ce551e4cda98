/// Every benchmark of the suite, in the order they run.
///
/// To add one, write a type conforming to ``Benchmark`` in `Workloads/` and list it here.
/// P3–P5, P9, S1–S5 and the record size row of P7 measure `PersistentOperations` through its
/// public API; S1–S5 against SQLite (the system library, linked by the benchmarks only).
enum BenchmarkRegistry {
    static let all: [any Benchmark] = [
        AsyncThroughputBenchmark(),   // P1
        RetryLatenessBenchmark(),     // P2
        DurableThroughputBenchmark(), // P3
        BatchedAddBenchmark(),        // P3b
        AddScalingBenchmark(),        // P4
        RestoreBenchmark(),           // P5
        IdleWaitBenchmark(),          // P6
        PayloadFormatBenchmark(),     // P7
        DependencyChainBenchmark(),   // P9
        ConditionBenchmark(),         // P10
        BackPressureBenchmark(),      // B1
        FairShareBenchmark(),         // F1
        IdempotentAddBenchmark(),     // I1
        LaneBenchmark(),              // L1–L2
        SQLiteComparisonBenchmark(),  // S1–S5
        MillionPendingBenchmark(),    // M1–M4
    ]
}
