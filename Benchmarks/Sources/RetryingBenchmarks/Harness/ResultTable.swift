/// The results as an aligned table that reads well in a terminal and is also a Markdown
/// table (the README's performance table is pasted from it).
enum ResultTable {
    static let headers = ["Id", "Workload", "Measured", "Baseline", "Ratio", "Target", "Met"]

    /// The table, then one line per row that has a note.
    static func render(_ results: [BenchmarkResult]) -> String {
        let rows = results.map(cells)
        let widths = headers.indices.map { column in
            ([headers[column]] + rows.map { $0[column] }).map(\.count).max() ?? 0
        }
        func line(_ cells: [String]) -> String {
            "| " + zip(cells, widths).map { cell, width in
                cell + String(repeating: " ", count: width - cell.count)
            }.joined(separator: " | ") + " |"
        }
        var lines = [line(headers), "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|"]
        lines += rows.map(line)

        let notes = results.compactMap { result in result.note.map { "- \(result.id): \($0)" } }
        if !notes.isEmpty {
            lines.append("")
            lines += notes
        }
        return lines.joined(separator: "\n")
    }

    private static func cells(_ result: BenchmarkResult) -> [String] {
        let baseline = result.baseline.map { value in
            result.baselineName.map { "\(result.unit.format(value)) (\($0))" } ?? result.unit.format(value)
        } ?? result.baselineName ?? "–"
        let met: String
        switch result.isTargetMet {
        case true?: met = "yes"
        case false?: met = "**MISSED**"
        case nil: met = "reported"
        }
        return [
            result.id,
            result.name,
            result.unit.format(result.value),
            baseline,
            result.ratio.map { String(format: "%.2f×", $0) } ?? "–",
            result.target?.formatted(unit: result.unit) ?? "–",
            met,
        ]
    }
}
