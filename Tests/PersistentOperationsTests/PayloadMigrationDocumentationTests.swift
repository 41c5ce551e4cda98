import Foundation
import Testing
import PersistentOperations

// The sample of "Changing a payload type" (README and the DocC article Resuming after a crash),
// compiled and run here (see `scripts/readme-snippets.py`).

/// The payload as version 1 of the app stored it: a file name, no album.
struct UploadV1: Codable, Sendable {
    var file: String
}

/// Version 1's operation, which stored `UploadV1` payloads.
final class AlbumUploadV1: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.album-upload"
    let payload: UploadV1
    init(payload: UploadV1) { self.payload = payload; super.init() }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) { baseOperationEnded() }
}

// snippet: payload-migration
final class AlbumUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.album-upload"   // unchanged
    static let payloadVersion = 2                 // version 2 added `album` to the payload
    let payload: Upload

    init(payload: Upload) {
        self.payload = payload
        super.init()
    }

    static func migratePayload(_ stored: StoredPayload) throws -> Upload {
        let old = try stored.decode(UploadV1.self)     // what version 1 stored
        return Upload(file: old.file, album: 0)         // 0: not in an album
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        DocumentationServer.upload(payload.file, replacingPartialUpload: isRetry) { _ in }
        baseOperationEnded()
    }
}
// end snippet

@Suite("Documentation examples (payload migration)", .timeLimit(.minutes(1)))
struct PayloadMigrationDocumentationTests {
    @Test func anUploadStoredByVersion1RunsInVersion2ThroughItsMigration() async throws {
        let temporary = try TemporaryDirectory()
        do {
            let operationQueue = OperationQueue()
            operationQueue.isSuspended = true
            let version1 = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
            version1.register(AlbumUploadV1.self)
            try version1.addOperation(AlbumUploadV1(payload: UploadV1(file: "IMG_0101.heic")))
            version1.close()
        }
        let queue = try PersistentOperationQueue(directory: temporary.store)
        queue.register(AlbumUpload.self)
        let report = try queue.restore()
        await queue.allOperationsFinished()
        #expect(report.restored.count == 1 && report.quarantined.isEmpty)
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_0101.heic") })
    }
}
