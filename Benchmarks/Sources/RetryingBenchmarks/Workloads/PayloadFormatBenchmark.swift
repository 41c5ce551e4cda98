import Foundation

/// P7 (the part that needs no store): size and coding cost of a typical payload in the
/// candidate record formats.
///
/// Encodes and decodes one typical payload — a URL string, an integer, a `Date` with
/// fractional seconds, a small `[String: String]` — with `PropertyListEncoder` in XML and
/// binary form, against `JSONEncoder` as the reference. Each coder runs a batch of
/// encodes, then a batch of decodes, in interleaved rounds; the medians per call are
/// compared. Whether each format gives back an equal payload is checked and reported.
/// Last, the size of the record file a `PersistentOperationQueue` writes for the payload.
struct PayloadFormatBenchmark: Benchmark {
    let id = "P7"
    let title = "typical payload: XML vs binary property list (JSON as reference), size and coding cost; the store's record size"

    func run(in context: BenchmarkContext) throws -> [BenchmarkResult] {
        let batch = context.size(full: 20_000, smoke: 1_000)
        let rounds = context.size(full: 7, smoke: 2)
        let payload = TypicalPayload.example

        let formats = PayloadFormat.allCases
        var encoded: [PayloadFormat: Data] = [:]
        var roundTrips: [PayloadFormat: Bool] = [:]
        for format in formats {
            let data = try format.encode(payload)
            encoded[format] = data
            roundTrips[format] = try format.decode(data) == payload
        }

        var encodeTimes: [PayloadFormat: [Double]] = [:]
        var decodeTimes: [PayloadFormat: [Double]] = [:]
        for round in 0..<rounds {
            let order = round.isMultiple(of: 2) ? formats : formats.reversed()
            for format in order {
                let data = encoded[format]!
                let encodeSeconds = try Timing.seconds {
                    for _ in 0..<batch { _ = try format.encode(payload) }
                }
                let decodeSeconds = try Timing.seconds {
                    for _ in 0..<batch { _ = try format.decode(data) }
                }
                encodeTimes[format, default: []].append(encodeSeconds / Double(batch) * 1e6)
                decodeTimes[format, default: []].append(decodeSeconds / Double(batch) * 1e6)
            }
        }

        let reference = PayloadFormat.json
        var rows: [BenchmarkResult] = []
        for format in [PayloadFormat.xmlPropertyList, .binaryPropertyList] {
            let exactness = roundTrips[format]! ? "decodes to an equal payload" : "does NOT decode to an equal payload"
            rows.append(BenchmarkResult(
                id: "\(id).\(format.rawValue).size",
                name: "typical payload size, \(format.name)",
                value: Double(encoded[format]!.count),
                unit: .bytes,
                baseline: Double(encoded[reference]!.count),
                baselineName: reference.name,
                note: "\(format.name) \(exactness)"
                    + (roundTrips[reference]! ? "; JSON decodes to an equal payload" : "; JSON does NOT decode to an equal payload")
            ))
            rows.append(BenchmarkResult(
                id: "\(id).\(format.rawValue).encode",
                name: "encode typical payload, \(format.name)",
                value: encodeTimes[format]!.median,
                unit: .microseconds,
                baseline: encodeTimes[reference]!.median,
                baselineName: reference.name
            ))
            rows.append(BenchmarkResult(
                id: "\(id).\(format.rawValue).decode",
                name: "decode typical payload, \(format.name)",
                value: decodeTimes[format]!.median,
                unit: .microseconds,
                baseline: decodeTimes[reference]!.median,
                baselineName: reference.name,
                note: format == .xmlPropertyList
                    ? "per call, median of \(rounds) interleaved rounds of \(batch.groupedDigits) calls"
                    : nil
            ))
        }
        let record = try StoreFixture.typicalRecordFileSize()
        let binaryPayload = encoded[.binaryPropertyList]!.count
        rows.append(BenchmarkResult(
            id: "\(id).record.size",
            name: "record file of the typical payload, as the queue stores it",
            value: Double(record.bytes),
            unit: .bytes,
            note: "written with PersistentOperationQueue.addOperation; 20-byte header + binary plist envelope holding the payload "
                + "(\(binaryPayload) B as a binary plist by itself); \(record.allocatedBytes) B allocated on this file system"
        ))
        return rows
    }
}

/// A payload as an app might persist it with an operation.
struct TypicalPayload: Codable, Equatable, Sendable {
    var url: String
    var attempt: Int
    var createdAt: Date
    var headers: [String: String]

    static let example = TypicalPayload(
        url: "https://api.example.com/v1/uploads/6F9619FF-8B86-D011-B42D-00CF4FC964FF?part=3",
        attempt: 3,
        // Fractional seconds on purpose: XML property lists keep whole seconds only.
        createdAt: Date(timeIntervalSinceReferenceDate: 785_000_000.123_456),
        headers: [
            "Content-Type": "application/octet-stream",
            "Authorization": "Bearer 0123456789abcdef0123456789abcdef",
            "X-Request-ID": "C2F3A1B4-5D6E-4F70-8192-A3B4C5D6E7F8",
        ]
    )
}

/// The formats P7 compares.
enum PayloadFormat: String, CaseIterable, Sendable {
    case xmlPropertyList = "xml"
    case binaryPropertyList = "binary"
    case json

    var name: String {
        switch self {
        case .xmlPropertyList: return "XML plist"
        case .binaryPropertyList: return "binary plist"
        case .json: return "JSON"
        }
    }

    func encode(_ payload: TypicalPayload) throws -> Data {
        switch self {
        case .xmlPropertyList:
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .xml
            return try encoder.encode(payload)
        case .binaryPropertyList:
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            return try encoder.encode(payload)
        case .json:
            return try JSONEncoder().encode(payload)
        }
    }

    func decode(_ data: Data) throws -> TypicalPayload {
        switch self {
        case .xmlPropertyList, .binaryPropertyList:
            return try PropertyListDecoder().decode(TypicalPayload.self, from: data)
        case .json:
            return try JSONDecoder().decode(TypicalPayload.self, from: data)
        }
    }
}
