import Foundation

/// The clocks the benchmarks read.
enum Timing {
    /// A monotonic time in nanoseconds, comparable across threads of this process.
    static func now() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds
    }

    /// Seconds between two readings of ``now()``.
    static func seconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end &- start) / 1e9
    }

    /// The wall-clock seconds `body` takes.
    ///
    /// ```swift
    /// let elapsed = try Timing.seconds { try runWorkload() }
    /// ```
    static func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = now()
        try body()
        return seconds(from: start, to: now())
    }

    /// The CPU time (user + system) the calling thread has used so far, in seconds.
    static func threadCPUSeconds() -> Double {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return .nan }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The CPU time (user + system, all threads) this process has used so far, in seconds.
    static func processCPUSeconds() -> Double {
        var time = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time) == 0 else { return .nan }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
