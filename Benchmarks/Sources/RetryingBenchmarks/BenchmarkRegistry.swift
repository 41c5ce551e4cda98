/// Every benchmark of the suite, in the order they run.
///
/// To add one, write a type conforming to ``Benchmark`` in `Workloads/` and list it here.
/// P3–P5 and the store's record size (P7) belong to `PersistentOperations` and are added
/// with its `PersistentOperationQueue`.
enum BenchmarkRegistry {
    static let all: [any Benchmark] = [
        AsyncThroughputBenchmark(),   // P1
        RetryLatenessBenchmark(),     // P2
        IdleWaitBenchmark(),          // P6
        PayloadFormatBenchmark(),     // P7
    ]
}
