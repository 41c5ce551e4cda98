import Foundation
import Testing
@testable import PersistentOperations

// The README's "Adding from an app extension": the extension's add and the app's queue,
// compiled and run as two processes would (the extension's inbox shares no object with the
// queue; the two-process SIGKILL test is InboxSoakTests).

struct PhotoPayload: Codable, Sendable, Equatable {
    var file: URL
    var album: String
}

/// A photo upload that journals its file's name.
final class UploadPhoto: RetryingOperation, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.upload-photo"
    static let uploaded = Locked<[String]>([])
    let payload: PhotoPayload

    init(payload: PhotoPayload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Self.uploaded.withLock { $0.append(payload.file.lastPathComponent) }
        Thread.detachNewThread { [self] in baseOperationEnded() }
    }
}

@Suite("Docs: adding from an app extension", .serialized, .timeLimit(.minutes(1)))
struct InboxDocumentationTests {
    @Test func theReadmesExtensionAddsAndTheAppsQueueTakesThemIn() async throws {
        let directory = try TemporaryDirectory()
        let sharedStoreURL = directory.store
        let photo = URL(fileURLWithPath: "/photos/IMG_0042.HEIC")
        UploadPhoto.uploaded.withLock { $0 = [] }

        // Given the extension's add, while the app is not running
        // snippet: extension-inbox-add
        // In the share extension: no queue, no lock; durable when it returns.
        let inbox = PersistentOperationInbox(directory: sharedStoreURL, producer: "share-extension")
        try inbox.addOperation(
            UploadPhoto(payload: PhotoPayload(file: photo, album: "Hike")),
            options: EnqueueOptions(tags: ["album:Hike"], lane: "uploads")
        )
        // end snippet
        #expect(inbox.waitingCount == 1)

        // When the app launches
        // snippet: app-group-queue
        // In the app: the only process that opens the store.
        var configuration = PersistentOperationQueue.Configuration()
        configuration.releasesStoreLockWhenInactive = true   // no file lock while suspended
        let queue = try PersistentOperationQueue(
            directory: sharedStoreURL, operationQueue: OperationQueue(), configuration: configuration
        )
        queue.register(UploadPhoto.self)
        try queue.restore()   // takes in what the extension added, then watches for more
        // end snippet
        defer { queue.close() }

        // Then the upload is taken in with its options and runs
        await queue.allOperationsFinished()
        #expect(UploadPhoto.uploaded.withLock { $0 } == ["IMG_0042.HEIC"])
        #expect(inbox.waitingCount == 0)

        // And an add made while the app runs is taken in as it arrives
        try inbox.addOperation(UploadPhoto(payload: PhotoPayload(file: URL(fileURLWithPath: "/photos/IMG_0043.HEIC"), album: "Hike")))
        #expect(await InboxLetterTests.eventually { UploadPhoto.uploaded.withLock { $0.count } == 2 })
        await queue.allOperationsFinished()
        #expect(UploadPhoto.uploaded.withLock { $0 } == ["IMG_0042.HEIC", "IMG_0043.HEIC"])
        #expect(try queue.counts().pending == 0)
    }
}
