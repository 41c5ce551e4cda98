import Foundation

/// The machine-readable results `--json PATH` writes.
///
/// Every row has the same keys (`null` when a row has no such figure), so scripts can
/// compare runs without special cases. `schemaVersion` changes when a key changes meaning.
struct ResultsFile: Encodable {
    var schemaVersion = 1
    var mode: RunMode
    /// `release` or `debug`: figures from a debug build mean nothing.
    var configuration: String
    /// When the run started, ISO 8601.
    var date: String
    var processorCount: Int
    var operatingSystem: String
    var results: [BenchmarkResult]

    /// Writes the file, pretty-printed with sorted keys so that runs diff cleanly.
    func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(self)
        data.append(Data("\n".utf8))
        try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}

extension BenchmarkResult: Encodable {
    private enum CodingKeys: String, CodingKey {
        case id, name, value, unit, baseline, baselineName, ratio, target, met, note
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(name, forKey: .name)
        try container.encode(value, forKey: .value)
        try container.encode(unit, forKey: .unit)
        try container.encode(baseline, forKey: .baseline)
        try container.encode(baselineName, forKey: .baselineName)
        try container.encode(ratio, forKey: .ratio)
        try container.encode(target, forKey: .target)
        try container.encode(isTargetMet, forKey: .met)
        try container.encode(note, forKey: .note)
    }
}
