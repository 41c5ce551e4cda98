/// Summaries of repeated measurements. Medians, not means: on a shared machine a round
/// that another process interrupted is an outlier to ignore, not a value to average in.
extension Array where Element == Double {
    /// The middle value (the mean of the two middle values for an even count); `nan` when
    /// empty.
    var median: Double {
        guard !isEmpty else { return .nan }
        let sorted = self.sorted()
        let middle = sorted.count / 2
        return sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
    }

    /// The nearest-rank percentile: the smallest value that at least `percent`% of the
    /// values do not exceed; `nan` when empty.
    ///
    /// ```swift
    /// let p99 = latenesses.percentile(99)
    /// ```
    func percentile(_ percent: Double) -> Double {
        guard !isEmpty else { return .nan }
        let sorted = self.sorted()
        let rank = Int((percent / 100 * Double(sorted.count)).rounded(.up))
        return sorted[Swift.min(Swift.max(rank, 1), sorted.count) - 1]
    }
}
