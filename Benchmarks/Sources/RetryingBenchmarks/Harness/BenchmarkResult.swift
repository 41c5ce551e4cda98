import Foundation

/// One row of the results: a measured figure beside the baseline measured in the same run,
/// and the target it is held to.
struct BenchmarkResult: Sendable {
    /// The benchmark's id, alone (`P1`) or with a suffix naming the row (`P2.p99`).
    var id: String
    /// What the row measures.
    var name: String
    /// The measured figure, in ``unit``.
    var value: Double
    var unit: BenchmarkUnit
    /// The same figure for the baseline, in ``unit``; `nil` when the row has none.
    var baseline: Double?
    /// What the baseline is, such as "bare Operation".
    var baselineName: String?
    /// How the figure compares with the baseline; usually `value / baseline`.
    var ratio: Double?
    /// What the figure should be; `nil` for a figure that is only reported.
    var target: BenchmarkTarget?
    /// Sizes, rates and caveats a reader needs to interpret the figure.
    var note: String?

    /// Creates a row; `ratio` defaults to `value / baseline`.
    init(
        id: String,
        name: String,
        value: Double,
        unit: BenchmarkUnit,
        baseline: Double? = nil,
        baselineName: String? = nil,
        ratio: Double? = nil,
        target: BenchmarkTarget? = nil,
        note: String? = nil
    ) {
        self.id = id
        self.name = name
        self.value = value
        self.unit = unit
        self.baseline = baseline
        self.baselineName = baselineName
        self.ratio = ratio ?? baseline.flatMap { $0 == 0 ? nil : value / $0 }
        self.target = target
        self.note = note
    }

    /// Whether the figure meets its target; `nil` when there is no target.
    var isTargetMet: Bool? {
        target?.isMet(value: value, ratio: ratio)
    }
}

/// The unit of a row's figures.
enum BenchmarkUnit: String, Sendable, Codable {
    case seconds = "s"
    case milliseconds = "ms"
    case microseconds = "µs"
    case bytes
    /// Mebibytes (2^20 bytes), for memory figures.
    case megabytes = "MB"
    /// Operations per second, for throughputs.
    case operationsPerSecond = "ops/s"
    /// A count per success, such as 429s per successful request.
    case perSuccess = "per success"
    /// A factor between two figures of the same run, such as the largest over the smallest.
    case times = "×"

    /// `value` with as many decimals as a reader needs, and the unit.
    func format(_ value: Double) -> String {
        switch self {
        case .bytes:
            return "\(Int(value.rounded())) B"
        case .operationsPerSecond:
            return "\(Int(value.rounded()).groupedDigits) \(rawValue)"
        case .seconds, .milliseconds, .microseconds, .megabytes, .perSuccess:
            return "\(BenchmarkUnit.formatNumber(value)) \(rawValue)"
        case .times:
            return "\(BenchmarkUnit.formatNumber(value))×"
        }
    }

    /// Three significant digits or so, never exponent notation.
    static func formatNumber(_ value: Double) -> String {
        let magnitude = abs(value)
        let decimals = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 ? 2 : magnitude >= 0.01 ? 3 : 4
        return String(format: "%.\(decimals)f", value)
    }
}

/// What a figure should be: a bound on its ratio to the baseline, or on the figure itself.
struct BenchmarkTarget: Sendable, Codable {
    /// What the bound applies to.
    enum Metric: String, Sendable, Codable {
        /// ``BenchmarkResult/ratio``.
        case ratio
        /// ``BenchmarkResult/value``, in the row's unit.
        case value
    }

    /// Which side of the limit is good.
    enum Comparison: String, Sendable, Codable {
        case atMost = "<="
        case atLeast = ">="
    }

    var metric: Metric
    var comparison: Comparison
    var limit: Double

    /// The ratio to the baseline must not exceed `limit` (times, lateness, costs).
    static func ratio(atMost limit: Double) -> BenchmarkTarget {
        BenchmarkTarget(metric: .ratio, comparison: .atMost, limit: limit)
    }

    /// The ratio to the baseline must reach `limit` (throughputs).
    static func ratio(atLeast limit: Double) -> BenchmarkTarget {
        BenchmarkTarget(metric: .ratio, comparison: .atLeast, limit: limit)
    }

    /// The figure itself must not exceed `limit`, in the row's unit.
    static func value(atMost limit: Double) -> BenchmarkTarget {
        BenchmarkTarget(metric: .value, comparison: .atMost, limit: limit)
    }

    /// Whether a row with these figures meets the target; `false` when the figure the
    /// target needs is missing.
    func isMet(value: Double, ratio: Double?) -> Bool {
        guard let measured = metric == .ratio ? ratio : value else { return false }
        switch comparison {
        case .atMost: return measured <= limit
        case .atLeast: return measured >= limit
        }
    }

    /// The target as the table shows it, such as `≤ 1.2×` or `≤ 3 ms`.
    func formatted(unit: BenchmarkUnit) -> String {
        let sign = comparison == .atMost ? "≤" : "≥"
        let limitText = String(format: "%g", limit)
        switch metric {
        case .ratio: return "\(sign) \(limitText)×"
        case .value: return unit == .times ? "\(sign) \(limitText)×" : "\(sign) \(limitText) \(unit == .bytes ? "B" : unit.rawValue)"
        }
    }
}
